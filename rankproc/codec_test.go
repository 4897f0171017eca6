package rankproc

import (
	"reflect"
	"testing"

	"github.com/gearboxlm/gearbox/forward"
)

func TestStepCodec(t *testing.T) {
	b := &forward.Batch{Seqs: []forward.SeqBatch{
		{Tokens: []int{1, 300, 70000}, Pos: 5, Blocks: []int{0, 9}, NumLogits: 1, Replica: 1},
		{Tokens: []int{}, Pos: 0, Blocks: []int{}, NumLogits: 0},
		{Tokens: []int{42}, Pos: 1 << 20, Blocks: []int{3}, NumLogits: 1, Replica: 0},
	}}
	p := encodeStep(nil, "sp=2,tp=2", b)
	name, got, err := decodeStep(p)
	if err != nil {
		t.Fatal(err)
	}
	if name != "sp=2,tp=2" || !reflect.DeepEqual(got, b) {
		t.Fatalf("decoded %q %+v, want %+v", name, got, b)
	}
	for n := range len(p) {
		if _, _, err := decodeStep(p[:n]); err == nil {
			t.Fatalf("a step cut to %d of %d bytes decoded", n, len(p))
		}
	}
	if _, _, err := decodeStep(append(p, 0)); err == nil {
		t.Fatal("a step with a trailing byte decoded")
	}
}

func TestRowsCodec(t *testing.T) {
	const vocab = 5
	src := make([]float32, 4*vocab)
	for i := range src {
		src[i] = float32(i) + 0.25
	}
	msg := encodeRows(nil, []int{3, 1}, src, vocab)
	if len(msg) > rowsLen(4, vocab) {
		t.Fatalf("message of %d bytes exceeds rowsLen %d", len(msg), rowsLen(4, vocab))
	}
	out := make([]float32, 4*vocab)
	if err := decodeRows(msg, out, vocab); err != nil {
		t.Fatal(err)
	}
	for r := range 4 {
		for j := range vocab {
			want := float32(0)
			if r == 1 || r == 3 {
				want = src[r*vocab+j]
			}
			if out[r*vocab+j] != want {
				t.Fatalf("row %d [%d] = %v, want %v", r, j, out[r*vocab+j], want)
			}
		}
	}
	if err := decodeRows(msg, make([]float32, 2*vocab), vocab); err == nil {
		t.Fatal("row 3 decoded into a step of 2 rows")
	}
	if err := decodeRows(msg[:len(msg)-1], out, vocab); err == nil {
		t.Fatal("a truncated message decoded")
	}
}
