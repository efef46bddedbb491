// The one-shot all-reduce's wire format (kernels/cuda/oneshot_all_reduce.cu): how a rank's part
// travels to its peers as flagged lines, where each line lands in a peer's receive buffer, and
// when a received line counts as this call's. Shared by the CUDA kernel and the host code that
// sizes the buffers and the CPU test that runs the protocol with threads as ranks.
//
// The protocol (NCCL calls its cousin "LL", low latency): the part, as raw bytes, is cut into
// chunks of 8 bytes; chunk c travels as line c of 16 bytes, two 64-bit words each holding 4
// payload bytes (low half) and the call's flag (high half). A 64-bit aligned word is written and
// read as one, so a reader that sees the flag in both words of a line sees the payload that came
// with it: no fence, no barrier, one trip over the link. Every rank writes each of its lines into
// every peer's buffer at [parity][own rank][line] and then waits, line by line, for its peers'
// lines in its own buffer.
//
// The flag of call e (1, 2, 3, ..., wrapping past 2^32 - 1 to 0) is e itself, and the parity is
// e & 1. Two parities suffice: a rank starts call e + 2 only after finishing call e + 1, which
// needed every peer's lines of call e + 1, sent once that peer had finished call e, so no peer
// still reads the parity that call e + 2 overwrites. A line left from an earlier call carries an
// older flag of the same parity (e - 2, e - 4, ... or the zeros the buffer starts with), never e.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define EXL3_ONESHOT_HD __host__ __device__ __forceinline__
#else
#define EXL3_ONESHOT_HD inline
#endif

namespace exl3::oneshot {

inline constexpr int kMaxRanks = 8;
inline constexpr int64_t kChunkBytes = 8;   // payload bytes per line
inline constexpr int64_t kLineBytes = 16;   // two words of {4 payload bytes, 4 flag bytes}
inline constexpr int kParities = 2;

// Lines that carry `bytes` of payload (the last one partly filled when bytes % 8 != 0).
EXL3_ONESHOT_HD int64_t lines_for(int64_t bytes) { return (bytes + kChunkBytes - 1) / kChunkBytes; }

// Bytes of one rank's receive buffer for parts of up to `max_bytes`: a slot of lines_for(max_bytes)
// lines per parity and source rank (the own rank's slot goes unused, keeping the index simple).
EXL3_ONESHOT_HD int64_t buffer_bytes(int world_size, int64_t max_bytes) {
  return static_cast<int64_t>(kParities) * world_size * lines_for(max_bytes) * kLineBytes;
}

// Index (in lines) of line `line` from rank `source` in a receive buffer, for the call with flag
// `flag`, when slots hold `slot_lines` lines.
EXL3_ONESHOT_HD int64_t line_offset(uint32_t flag, int world_size, int source, int64_t slot_lines, int64_t line) {
  return (static_cast<int64_t>(flag & 1u) * world_size + source) * slot_lines + line;
}

// One word of a line: 4 payload bytes (as a little-endian 32-bit value) under the flag.
EXL3_ONESHOT_HD uint64_t pack_word(uint32_t payload, uint32_t flag) {
  return static_cast<uint64_t>(payload) | (static_cast<uint64_t>(flag) << 32);
}
EXL3_ONESHOT_HD uint32_t word_payload(uint64_t word) { return static_cast<uint32_t>(word); }
EXL3_ONESHOT_HD uint32_t word_flag(uint64_t word) { return static_cast<uint32_t>(word >> 32); }

// The payload of line `line` of a part of `bytes` bytes at any alignment, read byte by byte: word0
// holds its bytes 0-3 and word1 bytes 4-7 (little-endian), zeros past the part's end. The kernel
// reads 8-byte aligned whole chunks as one 64-bit load instead (the same words).
struct LinePayload {
  uint32_t word0;
  uint32_t word1;
};
EXL3_ONESHOT_HD LinePayload line_payload_bytewise(const uint8_t* part, int64_t bytes, int64_t line) {
  const int64_t begin = line * kChunkBytes;
  const int64_t end = begin + kChunkBytes < bytes ? begin + kChunkBytes : bytes;
  LinePayload p{0u, 0u};
  for (int64_t b = begin; b < end; ++b) {
    const int at = static_cast<int>(b - begin);
    const uint32_t byte = part[b];
    if (at < 4) {
      p.word0 |= byte << (8 * at);
    } else {
      p.word1 |= byte << (8 * (at - 4));
    }
  }
  return p;
}

// Whether both words of a line carry `flag`, i.e. the line is this call's.
EXL3_ONESHOT_HD bool line_arrived(uint64_t word0, uint64_t word1, uint32_t flag) {
  return word_flag(word0) == flag && word_flag(word1) == flag;
}

// The flag of the call after the one with `flag` (the counter starts at 0, so the first call's
// flag is 1; it wraps, see the header comment).
EXL3_ONESHOT_HD uint32_t next_flag(uint32_t flag) { return flag + 1u; }

// Per-rank state in device memory, zeroed once when the buffers are made. `flag` is the flag of
// the last finished call; `blocks_done` counts the blocks of the call in flight that are done (the
// last resets it and advances `flag`); `error` is 0, or 1 + the first rank whose lines did not
// arrive within the deadline (the output is then wrong and the group must be torn down).
struct State {
  uint32_t flag;
  uint32_t blocks_done;
  uint32_t error;
  uint32_t unused;
};

}  // namespace exl3::oneshot
