package comm_test

import "testing"

// TestEmptyAllReduceBackToBack: an all-reduce of no elements followed at
// once by a non-empty one; a member must not leave the empty one while a
// peer still checks its arguments (it once did, and the peer saw the next
// call's length).
func TestEmptyAllReduceBackToBack(t *testing.T) {
	w := newWorld(t, 2)
	for i, err := range runAll(t, 2, func(r int) error {
		for range 200 {
			if err := w.Comm(r).AllReduce(bg, nil); err != nil {
				return err
			}
			if err := w.Comm(r).AllReduce(bg, input(1, r, 3)); err != nil {
				return err
			}
		}
		return nil
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
}
