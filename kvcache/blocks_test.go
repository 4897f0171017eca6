package kvcache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkInvariants verifies that every block is exactly one of in use,
// evictable or fresh, that the counters agree, and that refcounts equal
// the number of live sequences naming the block.
func (m *BlockManager) checkInvariants(live []*Seq) error {
	refs := make([]int32, m.cfg.NumBlocks)
	for _, s := range live {
		for _, b := range s.blocks {
			refs[b]++
		}
	}
	inLRU := make([]bool, m.cfg.NumBlocks)
	n := 0
	prev := int32(-1)
	for b := m.lruHead; b >= 0; b = m.blocks[b].next {
		if inLRU[b] {
			return fmt.Errorf("block %d twice in the evictable list", b)
		}
		if m.blocks[b].prev != prev {
			return fmt.Errorf("block %d: prev link %d, want %d", b, m.blocks[b].prev, prev)
		}
		inLRU[b] = true
		prev = b
		n++
	}
	if n != m.numLRU || prev != m.lruTail {
		return fmt.Errorf("evictable list has %d blocks ending at %d, counted %d ending at %d", n, prev, m.numLRU, m.lruTail)
	}
	inFresh := make([]bool, m.cfg.NumBlocks)
	for _, b := range m.fresh {
		if inFresh[b] {
			return fmt.Errorf("block %d twice in the fresh stack", b)
		}
		inFresh[b] = true
	}
	used := 0
	for b, st := range m.blocks {
		if st.ref != refs[b] {
			return fmt.Errorf("block %d: refcount %d, %d live sequences hold it", b, st.ref, refs[b])
		}
		states := 0
		if st.ref > 0 {
			states++
			used++
		}
		if inLRU[b] {
			states++
			if !st.hashed {
				return fmt.Errorf("evictable block %d is not cached", b)
			}
		}
		if inFresh[b] {
			states++
			if st.hashed {
				return fmt.Errorf("fresh block %d is cached", b)
			}
		}
		if states != 1 {
			return fmt.Errorf("block %d is in %d states (ref %d, evictable %v, fresh %v)", b, states, st.ref, inLRU[b], inFresh[b])
		}
		if st.hashed && m.cached[st.hash] != int32(b) {
			return fmt.Errorf("block %d's hash maps to block %d", b, m.cached[st.hash])
		}
	}
	if used != m.used {
		return fmt.Errorf("%d blocks in use, counted %d", used, m.used)
	}
	for h, b := range m.cached {
		if !m.blocks[b].hashed || m.blocks[b].hash != h {
			return fmt.Errorf("cache entry for block %d does not match the block", b)
		}
	}
	if m.seqs != len(live) {
		return fmt.Errorf("%d live sequences, counted %d", len(live), m.seqs)
	}
	return nil
}

func mustManager(t *testing.T, cfg ManagerConfig) *BlockManager {
	t.Helper()
	m, err := NewBlockManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// run admits tokens with its cached prefix, allocates all of them, marks
// them computed and returns the sequence and the tokens it reused.
func run(t *testing.T, m *BlockManager, tokens []int) (*Seq, int) {
	t.Helper()
	p := m.Match(tokens)
	s, ok := m.Admit(p, len(tokens))
	if !ok {
		t.Fatalf("admit of %d tokens refused", len(tokens))
	}
	m.Cache(s, tokens, len(tokens))
	return s, p.Tokens
}

func seqTokens(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func TestBlockManagerConfig(t *testing.T) {
	for _, cfg := range []ManagerConfig{
		{NumBlocks: 0, BlockSize: 4},
		{NumBlocks: 4, BlockSize: 0},
		{NumBlocks: 4, BlockSize: MaxBlockSize + 1},
		{NumBlocks: 4, BlockSize: 4, Watermark: 1},
		{NumBlocks: 4, BlockSize: 4, Watermark: -0.1},
	} {
		if _, err := NewBlockManager(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestBlockManagerAllocateFree(t *testing.T) {
	m := mustManager(t, ManagerConfig{NumBlocks: 4, BlockSize: 4})
	a, ok := m.Admit(Prefix{}, 9)
	if !ok || !slices.Equal(a.Blocks(), []int{0, 1, 2}) {
		t.Fatalf("admit 9 tokens: %v %v", ok, a)
	}
	if !m.Allocate(a, 12) || len(a.Blocks()) != 3 {
		t.Fatalf("allocating within the last block changed the table: %v", a.Blocks())
	}
	if _, ok := m.Admit(Prefix{}, 5); ok {
		t.Fatal("admitted 2 blocks with 1 free")
	}
	if m.Allocate(a, 17) {
		t.Fatal("grew by 2 blocks with 1 free")
	}
	if m.NumFree() != 1 || m.NumUsed() != 3 || m.Usage() != 0.75 {
		t.Fatalf("a refused request changed the pool: free %d used %d", m.NumFree(), m.NumUsed())
	}
	if !m.Allocate(a, 13) || !slices.Equal(a.Blocks(), []int{0, 1, 2, 3}) {
		t.Fatalf("grow to 13 tokens: %v", a.Blocks())
	}
	if err := m.checkInvariants([]*Seq{a}); err != nil {
		t.Fatal(err)
	}
	m.Free(a)
	m.Free(a)
	if m.NumFree() != 4 || m.NumUsed() != 0 || m.Allocate(a, 20) {
		t.Fatalf("after free: free %d used %d", m.NumFree(), m.NumUsed())
	}
	if err := m.checkInvariants(nil); err != nil {
		t.Fatal(err)
	}
}

func TestBlockManagerMatch(t *testing.T) {
	base := seqTokens(100, 16) // four full blocks of 4
	diverge := func(at int) []int {
		q := slices.Clone(base)
		q[at] = 7
		return q
	}
	tests := []struct {
		name    string
		caching bool
		query   []int
		want    int // tokens matched
	}{
		{"same tokens: never the block of the last token", true, base, 12},
		{"one token more", true, append(slices.Clone(base), 1), 16},
		{"shorter prompt", true, base[:10], 8},
		{"prompt ends at a block boundary", true, base[:8], 4},
		{"one token", true, base[:1], 0},
		{"diverges inside block 1", true, diverge(5), 4},
		{"diverges in the first token", true, diverge(0), 0},
		{"same block content after a different prefix", true, append(seqTokens(0, 4), base[4:]...), 0},
		{"caching off", false, append(slices.Clone(base), 1), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mustManager(t, ManagerConfig{NumBlocks: 16, BlockSize: 4, EnablePrefixCaching: tc.caching})
			a, _ := run(t, m, base)
			m.Free(a)
			s, hit := run(t, m, tc.query)
			if hit != tc.want {
				t.Fatalf("matched %d tokens, want %d", hit, tc.want)
			}
			if tc.caching {
				if m.PrefixQueries() != int64(len(base)+len(tc.query)) || m.PrefixHits() != int64(tc.want) {
					t.Fatalf("queries %d hits %d", m.PrefixQueries(), m.PrefixHits())
				}
			} else if m.PrefixQueries() != 0 || m.PrefixHits() != 0 || m.NumCached() != 0 {
				t.Fatalf("caching off: queries %d hits %d cached %d", m.PrefixQueries(), m.PrefixHits(), m.NumCached())
			}
			// Reused blocks are the first ones a held.
			if n := tc.want / 4; !slices.Equal(s.Blocks()[:n], []int{0, 1, 2, 3}[:n]) {
				t.Fatalf("table %v does not start with a's blocks", s.Blocks())
			}
			if err := m.checkInvariants([]*Seq{s}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestBlockManagerSharing(t *testing.T) {
	m := mustManager(t, ManagerConfig{NumBlocks: 8, BlockSize: 4, EnablePrefixCaching: true})
	prompt := seqTokens(0, 10)
	a, _ := run(t, m, prompt) // blocks 0,1 full and cached; 2 partial
	b, hit := run(t, m, prompt)
	if hit != 8 || !slices.Equal(b.Blocks(), []int{0, 1, 3}) {
		t.Fatalf("b reused %d tokens, table %v", hit, b.Blocks())
	}
	if m.NumUsed() != 4 {
		t.Fatalf("%d blocks in use, want 4 (2 shared)", m.NumUsed())
	}
	m.Free(a)
	if m.NumUsed() != 3 || m.NumFree() != 5 {
		t.Fatalf("after freeing a: used %d free %d", m.NumUsed(), m.NumFree())
	}
	if err := m.checkInvariants([]*Seq{b}); err != nil {
		t.Fatal(err)
	}
	m.Free(b)
	if m.NumUsed() != 0 || m.NumFree() != 8 || m.NumCached() != 2 {
		t.Fatalf("after freeing both: used %d free %d cached %d", m.NumUsed(), m.NumFree(), m.NumCached())
	}
	if err := m.checkInvariants(nil); err != nil {
		t.Fatal(err)
	}
}

func TestBlockManagerEvictsLRU(t *testing.T) {
	m := mustManager(t, ManagerConfig{NumBlocks: 6, BlockSize: 2, EnablePrefixCaching: true})
	a, _ := run(t, m, seqTokens(0, 4))  // blocks 0,1
	b, _ := run(t, m, seqTokens(50, 4)) // blocks 2,3
	m.Free(b)                           // evictable: 3, 2
	m.Free(a)                           // evictable: 3, 2, 1, 0
	// Two fresh blocks go first, then the least recently freed: b's tail,
	// then b's head.
	c, ok := m.Admit(Prefix{}, 8)
	if !ok || !slices.Equal(c.Blocks(), []int{4, 5, 3, 2}) {
		t.Fatalf("admit took %v, %v; want [4 5 3 2]", c.Blocks(), ok)
	}
	if p := m.Match(append(seqTokens(50, 4), 9)); p.Tokens != 0 {
		t.Fatalf("evicted prefix still matches %d tokens", p.Tokens)
	}
	p := m.Match(append(seqTokens(0, 4), 9))
	if p.Tokens != 4 {
		t.Fatalf("a's prefix matches %d tokens, want 4", p.Tokens)
	}
	// Admitting with a's prefix takes blocks 0 and 1 out of the evictable
	// list: it needs one more block and none is left.
	if _, ok := m.Admit(p, 6); ok {
		t.Fatal("admitted with no block for the new token")
	}
	if d, ok := m.Admit(p, 4); !ok || !slices.Equal(d.Blocks(), []int{0, 1}) {
		t.Fatalf("admit on the prefix alone: %v %v", d, ok)
	} else if err := m.checkInvariants([]*Seq{c, d}); err != nil {
		t.Fatal(err)
	}
}

func TestBlockManagerStalePrefix(t *testing.T) {
	m := mustManager(t, ManagerConfig{NumBlocks: 2, BlockSize: 2, EnablePrefixCaching: true})
	a, _ := run(t, m, seqTokens(0, 4))
	m.Free(a)
	p := m.Match(seqTokens(0, 5))
	if p.Tokens != 4 {
		t.Fatalf("matched %d", p.Tokens)
	}
	b, ok := m.Admit(Prefix{}, 2) // evicts block 1
	if !ok {
		t.Fatal("admit refused")
	}
	if _, ok := m.Admit(p, 5); ok {
		t.Fatal("admitted on a prefix whose block was evicted")
	}
	if err := m.checkInvariants([]*Seq{b}); err != nil {
		t.Fatal(err)
	}
}

func TestBlockManagerWatermark(t *testing.T) {
	tests := []struct {
		name   string
		held   int // blocks a running sequence holds first
		admit  int // blocks the new sequence asks for
		wantOK bool
	}{
		{"idle pool admits without the watermark", 0, 100, true},
		{"leaves exactly the watermark", 50, 40, true},
		{"would cut into the watermark", 50, 41, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mustManager(t, ManagerConfig{NumBlocks: 100, BlockSize: 1, Watermark: 0.1})
			var live []*Seq
			if tc.held > 0 {
				a, ok := m.Admit(Prefix{}, tc.held)
				if !ok {
					t.Fatal("first admit refused")
				}
				live = append(live, a)
			}
			s, ok := m.Admit(Prefix{}, tc.admit)
			if ok != tc.wantOK {
				t.Fatalf("admit %d with %d held: %v, want %v", tc.admit, tc.held, ok, tc.wantOK)
			}
			if ok {
				live = append(live, s)
			}
			if err := m.checkInvariants(live); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Growth ignores the watermark.
	m := mustManager(t, ManagerConfig{NumBlocks: 100, BlockSize: 1, Watermark: 0.1})
	a, _ := m.Admit(Prefix{}, 50)
	b, _ := m.Admit(Prefix{}, 40)
	if !m.Allocate(b, 50) || m.NumFree() != 0 {
		t.Fatalf("growth stopped at the watermark: %d free", m.NumFree())
	}
	if err := m.checkInvariants([]*Seq{a, b}); err != nil {
		t.Fatal(err)
	}
}

// TestBlockManagerRandom runs random sequences through a small pool and
// checks the invariants and that every reused block holds the tokens the
// sequence expects, with a shadow copy of what was written where.
func TestBlockManagerRandom(t *testing.T) {
	const numBlocks, bs = 24, 4
	rng := rand.New(rand.NewPCG(1, 2))
	m := mustManager(t, ManagerConfig{NumBlocks: numBlocks, BlockSize: bs, Watermark: 0.05, EnablePrefixCaching: true})
	written := make([][bs]int, numBlocks)
	type live struct {
		seq      *Seq
		tokens   []int
		computed int
	}
	var seqs []*live
	prefixes := [][]int{seqTokens(0, 12), seqTokens(100, 9), seqTokens(200, 3)}
	admitted, hits := 0, 0
	for step := 0; step < 3000; step++ {
		switch op := rng.IntN(10); {
		case op < 4: // admit a sequence with a shared prefix
			tokens := slices.Clone(prefixes[rng.IntN(len(prefixes))])
			for range rng.IntN(10) {
				tokens = append(tokens, rng.IntN(3))
			}
			p := m.Match(tokens)
			n := p.Tokens + 1 + rng.IntN(len(tokens)-p.Tokens)
			s, ok := m.Admit(p, n)
			if !ok {
				continue
			}
			admitted++
			hits += p.Tokens
			for pos := 0; pos < p.Tokens; pos++ {
				if got := written[s.blocks[pos/bs]][pos%bs]; got != tokens[pos] {
					t.Fatalf("step %d: reused position %d holds %d, want %d", step, pos, got, tokens[pos])
				}
			}
			l := &live{seq: s, tokens: tokens, computed: p.Tokens}
			for ; l.computed < n; l.computed++ {
				written[s.blocks[l.computed/bs]][l.computed%bs] = tokens[l.computed]
			}
			m.Cache(s, tokens, l.computed)
			seqs = append(seqs, l)
		case op < 8 && len(seqs) > 0: // grow one
			l := seqs[rng.IntN(len(seqs))]
			if l.computed == len(l.tokens) {
				l.tokens = append(l.tokens, rng.IntN(3))
			}
			if !m.Allocate(l.seq, l.computed+1) {
				continue
			}
			written[l.seq.blocks[l.computed/bs]][l.computed%bs] = l.tokens[l.computed]
			l.computed++
			m.Cache(l.seq, l.tokens, l.computed)
		case len(seqs) > 0: // free one
			i := rng.IntN(len(seqs))
			m.Free(seqs[i].seq)
			seqs = slices.Delete(seqs, i, i+1)
		}
		var ls []*Seq
		for _, l := range seqs {
			ls = append(ls, l.seq)
		}
		if err := m.checkInvariants(ls); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	if admitted < 100 || hits == 0 || m.PrefixHits() != int64(hits) {
		t.Fatalf("admitted %d, hit %d tokens (counted %d)", admitted, hits, m.PrefixHits())
	}
}

// TestShardedAllocation places a long sequence's blocks along the
// sequence on consecutive shards, SPTBlocks per shard, the rest on the
// last; a short one whole on the emptiest shard; and falls back to other
// shards when the wanted one is full.
func TestShardedAllocation(t *testing.T) {
	m, err := NewBlockManager(ManagerConfig{NumBlocks: 40, BlockSize: 4, Shards: 4, SPTBlocks: 3})
	if err != nil {
		t.Fatal(err)
	}
	shards := func(s *Seq) []int {
		var out []int
		for _, b := range s.Blocks() {
			out = append(out, m.Shard(b))
		}
		return out
	}
	long, ok := m.Admit(Prefix{}, 4*8) // 8 blocks: 3 + 3 + 2
	if !ok {
		t.Fatal("admit long")
	}
	if got, want := fmt.Sprint(shards(long)), "[0 0 0 1 1 1 2 2]"; got != want {
		t.Fatalf("long prompt on shards %s, want %s", got, want)
	}
	if !m.Allocate(long, 4*10) {
		t.Fatal("grow long")
	}
	if got, want := fmt.Sprint(shards(long)[8:]), "[2 3]"; got != want {
		t.Fatalf("decode blocks on shards %s, want %s", got, want)
	}
	short, ok := m.Admit(Prefix{}, 4*2)
	if !ok {
		t.Fatal("admit short")
	}
	if got, want := fmt.Sprint(shards(short)), "[3 3]"; got != want { // shard 3 is the emptiest (9 free)
		t.Fatalf("short prompt on shards %s, want %s", got, want)
	}
	if !m.Allocate(long, 4*30) { // far beyond 4 shards × 3 blocks: the rest goes to the last (shard 3), then wherever is free
		t.Fatal("grow long further")
	}
	if _, err := NewBlockManager(ManagerConfig{NumBlocks: 10, BlockSize: 4, Shards: 4, SPTBlocks: 1}); err == nil {
		t.Fatal("4 shards of 10 blocks accepted")
	}
	if m.NumUsed() != len(long.Blocks())+len(short.Blocks()) {
		t.Fatalf("used %d, tables hold %d", m.NumUsed(), len(long.Blocks())+len(short.Blocks()))
	}
	seen := map[int]bool{}
	for _, b := range append(long.Blocks(), short.Blocks()...) {
		if seen[b] {
			t.Fatalf("block %d handed out twice", b)
		}
		seen[b] = true
	}
}

// TestSaltedPrefix: blocks cached by a sequence of one salt match only
// sequences of that salt, salt 0 being the unsalted Match, and a
// sequence admitted without a match still caches under its salt.
func TestSaltedPrefix(t *testing.T) {
	m, err := NewBlockManager(ManagerConfig{NumBlocks: 16, BlockSize: 2, EnablePrefixCaching: true})
	if err != nil {
		t.Fatal(err)
	}
	tokens := []int{1, 2, 3, 4, 5}
	run := func(p Prefix) *Seq {
		s, ok := m.Admit(p, len(tokens))
		if !ok {
			t.Fatal("admit")
		}
		m.Cache(s, tokens, len(tokens))
		return s
	}
	run(Salted(7)) // no lookup, cached under 7
	if p := m.Match(tokens); p.Tokens != 0 {
		t.Fatalf("unsalted match of salt 7's blocks: %d tokens", p.Tokens)
	}
	if p := m.MatchSalted(tokens, 8); p.Tokens != 0 {
		t.Fatalf("salt 8 matched salt 7's blocks: %d tokens", p.Tokens)
	}
	if p := m.MatchSalted(tokens, 7); p.Tokens != 4 {
		t.Fatalf("salt 7 matched %d tokens of its own, want 4", p.Tokens)
	}
	run(m.Match(tokens))
	if p, q := m.Match(tokens), m.MatchSalted(tokens, 0); p.Tokens != 4 || q.Tokens != 4 {
		t.Fatalf("unsalted: %d and %d tokens, want 4", p.Tokens, q.Tokens)
	}
	if s := run(m.MatchSalted(tokens, 7)); len(s.Blocks()) != 3 {
		t.Fatalf("salt 7 sequence has %d blocks", len(s.Blocks()))
	}
}
