package tokenizer

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"unicode/utf8"
)

// merge is the result of merging a pair of tokens: its rank (lower merges
// first) and the id of the merged token.
type merge struct{ rank, id int32 }

const noRank = math.MaxInt32

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpeModel is a BPE model (tokenizer.json "model" of type "BPE"). A word
// starts as one symbol per byte (byte-level models) or per rune, and the
// adjacent pair with the lowest merge rank is merged until none is left;
// ties go to the leftmost pair. It is immutable apart from its word cache
// and safe for concurrent use.
type bpeModel struct {
	byteLevel    bool
	vocab        map[string]int32 // token text as the model sees it: raw bytes when byteLevel
	merges       map[uint64]merge
	byteIDs      [256]int32 // byteLevel: the token of each byte, -1 when missing
	fallbackIDs  [256]int32 // the <0xNN> tokens, -1 when missing
	byteFallback bool
	unk          int32 // -1 when there is no unknown token
	fuseUnk      bool
	ignoreMerges bool // a word that is a token is not merged (Llama 3)
	// splitMeta: words are cut before each "▁" that follows another rune.
	// Exact when no token has "▁" after another rune (then no merge can
	// cross such a point), which is checked on the vocabulary; it lets
	// SentencePiece-style models, which have no pre-tokenizer, merge and
	// cache word-sized pieces instead of whole texts.
	splitMeta bool
	cache     *wordCache
}

const metaspace = "\u2581" // "▁"

// canSplitMeta reports whether cutting words before a "▁" that follows
// another rune leaves BPE results unchanged for this vocabulary.
func canSplitMeta(vocab map[string]int, byteLevel, ignoreMerges bool) bool {
	if byteLevel || ignoreMerges {
		return false
	}
	if _, ok := vocab[metaspace]; !ok {
		return false
	}
	for tok := range vocab {
		for i := 1; i < len(tok); i++ {
			k := strings.Index(tok[i:], metaspace)
			if k < 0 {
				break
			}
			if i += k; !strings.HasSuffix(tok[:i], metaspace) {
				return false
			}
		}
	}
	return true
}

// smallWord is the longest word merged by rescanning an array of pair ranks;
// longer ones use a heap. Both give the same result.
const smallWord = 48

// scratch holds buffers reused within one Encode call, and pooled.
type scratch struct {
	spans     []span
	normSpans []span
	pieces    []piece
	matches   [][2]int
	syms      []int32
	ranks     []merge
	nodes     []bpeNode
	heap      bpeHeap
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxPooledLen bounds the buffers a pooled scratch keeps.
const maxPooledLen = 1 << 14

// release drops the scratch's references into the text just encoded (so a
// pooled scratch does not keep a prompt alive) and any oversized buffer,
// and returns it to the pool.
func (sc *scratch) release() {
	sc.spans = clearSlice(sc.spans)
	sc.normSpans = clearSlice(sc.normSpans)
	sc.pieces = clearSlice(sc.pieces)
	sc.matches = clearSlice(sc.matches)
	sc.syms = clearSlice(sc.syms)
	sc.ranks = clearSlice(sc.ranks)
	sc.nodes = clearSlice(sc.nodes)
	sc.heap = clearSlice(sc.heap)
	scratchPool.Put(sc)
}

// clearSlice zeroes the elements of s in use and empties it, or drops it
// when it has grown past maxPooledLen.
func clearSlice[S ~[]E, E any](s S) S {
	if cap(s) > maxPooledLen {
		return nil
	}
	clear(s)
	return s[:0]
}

func (m *bpeModel) rank(a, b int32) merge {
	if mg, ok := m.merges[pairKey(a, b)]; ok {
		return mg
	}
	return merge{rank: noRank}
}

// encodeWord appends the token ids of one pre-tokenized word.
func (m *bpeModel) encodeWord(dst []int, w string, sc *scratch) []int {
	if w == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[w]; ok {
			return append(dst, int(id))
		}
	}
	if !m.splitMeta {
		return m.encodeChunk(dst, w, sc)
	}
	start := 0
	for i := 1; i < len(w); {
		k := strings.Index(w[i:], metaspace)
		if k < 0 {
			break
		}
		if i += k; !strings.HasSuffix(w[:i], metaspace) {
			dst = m.encodeChunk(dst, w[start:i], sc)
			start = i
		}
		i += len(metaspace)
	}
	return m.encodeChunk(dst, w[start:], sc)
}

// encodeChunk appends the token ids of w, merged as a whole.
func (m *bpeModel) encodeChunk(dst []int, w string, sc *scratch) []int {
	cacheable := m.cache != nil && len(w) <= maxCachedWord
	if cacheable {
		if ids, ok := m.cache.get(w); ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	syms := m.mergeWord(m.initialSymbols(sc.syms[:0], w), sc)
	sc.syms = syms
	if cacheable {
		m.cache.put(w, syms)
	}
	for _, id := range syms {
		dst = append(dst, int(id))
	}
	return dst
}

// initialSymbols appends the symbols w starts as: one per byte or rune,
// runes missing from the vocabulary spelled as <0xNN> byte tokens or as the
// unknown token (runs of unknowns fused when fuseUnk) or else dropped.
func (m *bpeModel) initialSymbols(syms []int32, w string) []int32 {
	lastUnk := false
	unknown := func() {
		if m.unk < 0 || (m.fuseUnk && lastUnk) {
			return
		}
		syms = append(syms, m.unk)
		lastUnk = true
	}
	if m.byteLevel {
		for i := 0; i < len(w); i++ {
			if id := m.byteIDs[w[i]]; id >= 0 {
				syms = append(syms, id)
				lastUnk = false
			} else {
				unknown()
			}
		}
		return syms
	}
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRuneInString(w[i:])
		s := w[i : i+n]
		i += n
		if id, ok := m.vocab[s]; ok {
			syms = append(syms, id)
			lastUnk = false
			continue
		}
		if m.byteFallback && m.hasFallback(s) {
			for j := 0; j < len(s); j++ {
				syms = append(syms, m.fallbackIDs[s[j]])
			}
			lastUnk = false
			continue
		}
		unknown()
	}
	return syms
}

func (m *bpeModel) hasFallback(s string) bool {
	for j := 0; j < len(s); j++ {
		if m.fallbackIDs[s[j]] < 0 {
			return false
		}
	}
	return true
}

func (m *bpeModel) mergeWord(syms []int32, sc *scratch) []int32 {
	switch {
	case len(syms) < 2:
		return syms
	case len(syms) <= smallWord:
		return m.mergeSmall(syms, sc)
	}
	return m.mergeHeap(syms, sc)
}

// mergeSmall keeps the rank of every adjacent pair in an array and rescans
// it for the minimum after each merge: O(n²), fastest for short words.
func (m *bpeModel) mergeSmall(syms []int32, sc *scratch) []int32 {
	ranks := sc.ranks[:0]
	for i := 0; i+1 < len(syms); i++ {
		ranks = append(ranks, m.rank(syms[i], syms[i+1]))
	}
	for {
		best, bestRank := -1, int32(noRank)
		for i, r := range ranks {
			if r.rank < bestRank {
				best, bestRank = i, r.rank
			}
		}
		if best < 0 {
			break
		}
		syms[best] = ranks[best].id
		syms = append(syms[:best+1], syms[best+2:]...)
		ranks = append(ranks[:best], ranks[best+1:]...)
		if best > 0 {
			ranks[best-1] = m.rank(syms[best-1], syms[best])
		}
		if best < len(ranks) {
			ranks[best] = m.rank(syms[best], syms[best+1])
		}
	}
	sc.ranks = ranks
	return syms
}

type bpeNode struct {
	id         int32 // -1 once merged into its left neighbour
	prev, next int32
}

// bpeCand is a pair that may be merged: the symbols at pos and its next
// neighbour, when they still hold left and right.
type bpeCand struct {
	rank, pos   int32
	left, right int32
	id          int32
}

// bpeHeap is a binary min-heap of candidates by (rank, pos).
type bpeHeap []bpeCand

func (h bpeHeap) less(i, j int) bool {
	return h[i].rank < h[j].rank || (h[i].rank == h[j].rank && h[i].pos < h[j].pos)
}

func (h *bpeHeap) push(c bpeCand) {
	*h = append(*h, c)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *bpeHeap) pop() bpeCand {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l, r, small := 2*i+1, 2*i+2, i
		if l < n && q.less(l, small) {
			small = l
		}
		if r < n && q.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	*h = q
	return top
}

// mergeHeap is the linked-list and priority-queue algorithm of Hugging
// Face tokenizers: O(n log n), for long words (SentencePiece-style models
// merge whole sentences).
func (m *bpeModel) mergeHeap(syms []int32, sc *scratch) []int32 {
	nodes := sc.nodes[:0]
	for i, id := range syms {
		nodes = append(nodes, bpeNode{id: id, prev: int32(i - 1), next: int32(i + 1)})
	}
	nodes[len(nodes)-1].next = -1
	h := sc.heap[:0]
	try := func(pos int32) {
		nx := nodes[pos].next
		if nx < 0 {
			return
		}
		l, r := nodes[pos].id, nodes[nx].id
		if mg := m.rank(l, r); mg.rank != noRank {
			h.push(bpeCand{rank: mg.rank, pos: pos, left: l, right: r, id: mg.id})
		}
	}
	for i := range nodes {
		try(int32(i))
	}
	for len(h) > 0 {
		c := h.pop()
		n := &nodes[c.pos]
		if n.id != c.left || n.next < 0 || nodes[n.next].id != c.right {
			continue // stale: one side has been merged since
		}
		right := n.next
		n.id = c.id
		n.next = nodes[right].next
		if n.next >= 0 {
			nodes[n.next].prev = c.pos
		}
		nodes[right].id = -1
		if n.prev >= 0 {
			try(n.prev)
		}
		try(c.pos)
	}
	syms = syms[:0]
	for i := int32(0); i >= 0; i = nodes[i].next {
		syms = append(syms, nodes[i].id)
	}
	sc.nodes, sc.heap = nodes, h
	return syms
}

// maxCachedWord is the longest word (bytes) the cache keeps.
const maxCachedWord = 64

const (
	cacheShards   = 32
	cacheShardCap = 4096 // words per shard; a full shard is emptied
)

// wordCache remembers the ids of recent words. It is bounded and safe for
// concurrent use.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]struct {
		mu sync.RWMutex
		m  map[string][]int32
	}
}

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]int32)
	}
	return c
}

func (c *wordCache) shard(w string) int { return int(maphash.String(c.seed, w) % cacheShards) }

func (c *wordCache) get(w string) ([]int32, bool) {
	s := &c.shards[c.shard(w)]
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	s := &c.shards[c.shard(w)]
	s.mu.Lock()
	if len(s.m) >= cacheShardCap {
		s.m = make(map[string][]int32, cacheShardCap)
	}
	s.m[strings.Clone(w)] = append([]int32(nil), ids...)
	s.mu.Unlock()
}
