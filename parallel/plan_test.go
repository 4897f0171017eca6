package parallel

import (
	"slices"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/model"
)

func cfg(heads, kv, layers int) *model.Config {
	return &model.Config{Hidden: 64, Intermediate: 100, Layers: layers, Heads: heads, KVHeads: kv, HeadDim: 64 / heads, Vocab: 321}
}

func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want Plan
		str  string
	}{
		{"", Single, "single"},
		{"tp=2", Plan{1, 1, 1, 2}, "tp=2"},
		{"sp=4, tp=2", Plan{1, 1, 4, 2}, "sp=4,tp=2"},
		{"TP=2,dp=3,pp=2", Plan{3, 2, 1, 2}, "dp=3,pp=2,tp=2"},
	}
	for _, c := range cases {
		p, err := Parse(c.in)
		if err != nil || p != c.want || p.String() != c.str {
			t.Errorf("Parse(%q) = %+v %q, %v", c.in, p, p.String(), err)
		}
	}
	for _, bad := range []string{"tp", "tp=0", "tp=-1", "xp=2", "tp=2,tp=4", "tp=two"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestValidate(t *testing.T) {
	c := cfg(8, 2, 3)
	for _, s := range []string{"tp=8", "sp=2,tp=4", "sp=8", "pp=3", "tp=2,dp=4", "tp=2"} {
		p, _ := Parse(s)
		if err := p.Validate(c); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := []struct {
		plan string
		cfg  *model.Config
		want string
	}{
		{"tp=3", c, "sp·tp = 3 must divide the 8 attention heads"},
		{"sp=16", c, "sp·tp = 16 must divide the 8 attention heads"},
		{"pp=4", c, "pp = 4 exceeds the 3 layers"},
		{"tp=4", &model.Config{Heads: 12, KVHeads: 6, Layers: 2}, "sp·tp = 4 and the 6 KV heads must divide one another"},
	}
	for _, b := range bad {
		p, _ := Parse(b.plan)
		if err := p.Validate(b.cfg); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: err %v, want %q", b.plan, err, b.want)
		}
	}
}

func TestCoordsAndShiftOrder(t *testing.T) {
	p := Plan{DP: 1, PP: 1, SP: 3, TP: 2}
	for r := 0; r < p.Ranks(); r++ {
		c := p.Coord(r)
		if p.Rank(c) != r || r != c.SP*2+c.TP {
			t.Fatalf("rank %d: coord %+v", r, c)
		}
	}
	if got := p.ShiftOrder(0, 0); !slices.Equal(got, []int{0, 2, 4, 1, 3, 5}) {
		t.Fatalf("shift order %v, want the paper's 0 2 4 1 3 5", got)
	}
	base, shift := Standard(p), ShiftPlacement(p)
	cfg := &model.Config{Heads: 6, KVHeads: 6, Layers: 2}
	if !base.SharesKV(cfg, shift) {
		t.Fatal("base and shift placements do not share the KV cache")
	}
	if Standard(Plan{1, 1, 1, 6}).SharesKV(cfg, base) {
		t.Fatal("plain tp=6 (chunk = rank) claims KV compatibility with sp=3,tp=2")
	}
	if got := base.TPGroup(3); !slices.Equal(got, Group{2, 3}) {
		t.Fatalf("TP group of rank 3: %v", got)
	}
	if got := base.SPGroup(3); !slices.Equal(got, Group{1, 3, 5}) {
		t.Fatalf("SP group of rank 3: %v", got)
	}
	if got := shift.TPGroup(3); !slices.Equal(got, Group{0, 2, 4, 1, 3, 5}) {
		t.Fatalf("shift TP group: %v", got)
	}
	for r := range base.Coords {
		if base.Chunk(r) != shift.Chunk(r) || base.Chunk(r) != p.Coord(r).TP*3+p.Coord(r).SP {
			t.Fatalf("rank %d: base chunk %d, shift chunk %d", r, base.Chunk(r), shift.Chunk(r))
		}
	}
	pp := Plan{DP: 2, PP: 2, SP: 1, TP: 2}
	if got := Standard(pp).Peer(1, 1); got != 3 {
		t.Fatalf("stage-1 peer of rank 1: %d", got)
	}
}

func TestChunkHeads(t *testing.T) {
	c := cfg(8, 2, 2)
	// 8 chunks over 2 KV heads: each KV head replicated 4 times.
	for ch := 0; ch < 8; ch++ {
		h := ChunkHeads(c, ch, 8)
		if h.QLo != ch || h.QHi != ch+1 || h.KVLo != ch/4 || h.KVHi != ch/4+1 {
			t.Fatalf("chunk %d: %+v", ch, h)
		}
		// Every query head of the chunk reads a KV head in the chunk's range.
		for q := h.QLo; q < h.QHi; q++ {
			if kv := q / (c.Heads / c.KVHeads); kv < h.KVLo || kv >= h.KVHi {
				t.Fatalf("chunk %d query head %d reads KV head %d outside %+v", ch, q, kv, h)
			}
		}
	}
	if h := ChunkHeads(c, 1, 2); h != (Heads{4, 8, 1, 2}) {
		t.Fatalf("chunk 1 of 2: %+v", h)
	}
	if h := SliceHeads(c, 1, 2, 2); h != (Heads{4, 8, 1, 2}) {
		t.Fatalf("slice 1 of (sp=2, tp=2): %+v", h)
	}
}

func TestEvenAndStages(t *testing.T) {
	got := []Span{Even(10, 3, 0), Even(10, 3, 1), Even(10, 3, 2)}
	if !slices.Equal(got, []Span{{0, 4}, {4, 7}, {7, 10}}) {
		t.Fatalf("Even(10, 3): %v", got)
	}
	if s := (Plan{PP: 2}).Stage(1, 5); s != (Span{3, 5}) {
		t.Fatalf("stage 1 of 5 layers: %v", s)
	}
}
