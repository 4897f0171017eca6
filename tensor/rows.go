package tensor

// RowIndependentMin is the fewest rows m for which MatMulW and MatMulWAcc
// compute each output row independently of the rows beside it: from it
// on they run the packed GEMM, whose every element is one kc-blocked
// dot product whatever m and the row's place (edge tiles go through the
// same micro-kernel), so a row's result is the same bit for bit in a
// product of any m ≥ RowIndependentMin rows. Below it they run the GEMV,
// which rounds differently. Under -tags openblas the promise holds to
// float32 rounding only (RowsExact).
const RowIndependentMin = gemvMaxM + 1
