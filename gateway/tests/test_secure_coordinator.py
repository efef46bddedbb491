"""The gateway behind a coordinator that needs a bearer token and serves TLS (exl3-launch
--auth-token-file --tls-cert --tls-key): exl3-launch hands the gateway the token file and the CA
(--openai-grpc-tls-ca), and completions work through it."""

import os

import openai

from conftest import REPO
from launched_cluster import MODEL_NAME, LaunchedCluster

TLS = os.path.join(REPO, "tests", "data", "tls")


def test_completion_through_token_and_tls(tmp_path):
    token = tmp_path / "token"
    token.write_text("coordinator-token-81f2\n")
    c = LaunchedCluster(str(tmp_path / "exl3-launch.log"), [
        "--auth-token-file", str(token), "--tls-cert", os.path.join(TLS, "server.pem"),
        "--tls-key", os.path.join(TLS, "server.key"), "--openai-grpc-tls-ca", os.path.join(TLS, "ca.pem")])
    try:
        c.wait_ready()
        client = openai.OpenAI(base_url=c.openai_url + "/v1", api_key="unused", timeout=120, max_retries=0)
        r = client.completions.create(model=MODEL_NAME, prompt="The history of", max_tokens=4, temperature=0)
        assert r.usage.completion_tokens == 4 and r.choices[0].text != ""
    finally:
        code = c.stop()
    assert code == 0, c.log_tail()
