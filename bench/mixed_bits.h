// Per-tensor bit widths for a synthetic model: a target mean bits per weight X becomes a mix of
// K = floor(X) and K = ceil(X) over the decoder linears (weighted by weight count), the way
// ExLlamaV3's optimizer mixes K to meet a budget.
#pragma once

#include <cstdint>
#include <vector>

namespace exl3 {

// K for each linear of `weights` (weight counts) so that sum(K * w) / sum(w) is as close to
// `target_bpw` (in [1, 8]) as a greedy pass allows: in a `seed`-shuffled order, a linear gets
// K = ceil(X) when that brings the total nearer the target. With many linears of similar size the
// mean lands within half a linear's share of the target.
std::vector<int> assign_mixed_bits(const std::vector<uint64_t>& weights, double target_bpw, uint64_t seed);

// sum(K * w) / sum(w).
double mean_bits(const std::vector<uint64_t>& weights, const std::vector<int>& bits);

}  // namespace exl3
