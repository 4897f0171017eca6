package cudaexec

import (
	"fmt"
	"sort"
)

// Buckets are the decode batch sizes captured as CUDA graphs, ascending. A
// batch runs in the graph of the smallest bucket that holds it, padded with
// idle rows; a batch above the largest bucket runs as plain launches.
type Buckets []int

// DefaultMaxGraphBatch is vLLM's default cap on captured batch sizes.
const DefaultMaxGraphBatch = 512

// VLLMBuckets returns the batch sizes vLLM captures by default for a cap of
// max: 1, 2, 4, then multiples of 8 below 256, then multiples of 16 from
// 256 up to max (vllm/config/vllm.py, VllmConfig._set_cudagraph_sizes:
// cudagraph_capture_sizes = [1, 2, 4] + range(8, 256, 8) +
// range(256, max_graph_size + 1, 16), with
// max_graph_size = min(max_num_seqs * 2, 512)). Sizes above max are left
// out; max below 1 gives no buckets.
func VLLMBuckets(max int) Buckets {
	var b Buckets
	for _, s := range []int{1, 2, 4} {
		if s <= max {
			b = append(b, s)
		}
	}
	for s := 8; s < 256 && s <= max; s += 8 {
		b = append(b, s)
	}
	for s := 256; s <= max; s += 16 {
		b = append(b, s)
	}
	return b
}

// NewBuckets validates sizes (positive, no repeats) and returns them sorted.
func NewBuckets(sizes []int) (Buckets, error) {
	b := append(Buckets(nil), sizes...)
	sort.Ints(b)
	for i, s := range b {
		if s < 1 {
			return nil, fmt.Errorf("gpu: graph bucket %d is not positive", s)
		}
		if i > 0 && b[i-1] == s {
			return nil, fmt.Errorf("gpu: graph bucket %d repeated", s)
		}
	}
	return b, nil
}

// Max is the largest bucket, or 0 when there are none.
func (b Buckets) Max() int {
	if len(b) == 0 {
		return 0
	}
	return b[len(b)-1]
}

// Bucket returns the smallest bucket ≥ batch. ok is false when batch is
// below 1 or above the largest bucket: run it without a graph.
func (b Buckets) Bucket(batch int) (size int, ok bool) {
	if batch < 1 {
		return 0, false
	}
	i := sort.SearchInts(b, batch)
	if i == len(b) {
		return 0, false
	}
	return b[i], true
}
