"""Python gRPC stubs of proto/inference.proto, generated at start-up with grpcio-tools' bundled
protoc into a private temporary folder (removed once they are imported), so they always match the proto the
coordinator was built from and need no build step. Debian's python3-grpc-tools is not used: its
protoc 3.5 refuses proto3 `optional`."""

import importlib
import os
import shutil
import sys
import tempfile


class StubError(Exception):
    pass


def default_proto_path():
    """proto/inference.proto of the checkout this package sits in."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "proto", "inference.proto"))


def load_stubs(proto_path):
    """Generates and imports inference_pb2 and inference_pb2_grpc; returns (pb2, pb2_grpc)."""
    try:
        import grpc_tools  # noqa: F401 (imported for use in _compile_and_import)
    except ImportError as e:
        raise StubError("grpcio-tools is not installed in %s (%s): run scripts/setup" % (sys.executable, e))
    if not os.path.isfile(proto_path):
        raise StubError("proto file %s not found (--proto)" % proto_path)
    out = tempfile.mkdtemp(prefix="exl3-gateway-stubs-")
    try:
        return _compile_and_import(proto_path, out)
    finally:
        # The imported modules live on in memory; nothing reads the files again.
        shutil.rmtree(out, ignore_errors=True)


def _compile_and_import(proto_path, out):
    import grpc_tools
    from grpc_tools import protoc
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["grpc_tools.protoc", "-I" + os.path.dirname(os.path.abspath(proto_path)), "-I" + include,
            "--python_out=" + out, "--grpc_python_out=" + out, os.path.basename(proto_path)]
    if protoc.main(args) != 0:
        raise StubError("protoc could not compile %s" % proto_path)
    name = os.path.splitext(os.path.basename(proto_path))[0]
    sys.path.insert(0, out)
    try:
        return importlib.import_module(name + "_pb2"), importlib.import_module(name + "_pb2_grpc")
    finally:
        sys.path.remove(out)
