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

// BenchmarkStepCodec encodes and decodes a decode step of 32 sequences
// with 64-block tables, the message process 0 sends every step.
func BenchmarkStepCodec(b *testing.B) {
	batch := &forward.Batch{}
	for i := range 32 {
		blocks := make([]int, 64)
		for j := range blocks {
			blocks[j] = i*64 + j
		}
		batch.Seqs = append(batch.Seqs, forward.SeqBatch{Tokens: []int{1000 + i}, Pos: 900 + i, Blocks: blocks, NumLogits: 1})
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = encodeStep(buf[:0], "tp=2", batch)
		if _, _, err := decodeStep(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkRowsCodec encodes and decodes 32 rows of a 32,000-token
// vocabulary, a follower's logits for a 32-sequence decode step.
func BenchmarkRowsCodec(b *testing.B) {
	const vocab, rows = 32000, 32
	src := make([]float32, rows*vocab)
	out := make([]float32, rows*vocab)
	idx := make([]int, rows)
	for i := range idx {
		idx[i] = i
	}
	var buf []byte
	b.SetBytes(int64(4 * rows * vocab))
	b.ReportAllocs()
	for b.Loop() {
		buf = encodeRows(buf[:0], idx, src, vocab)
		if err := decodeRows(buf, out, vocab); err != nil {
			b.Fatal(err)
		}
	}
}
