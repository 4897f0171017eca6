package kvcache

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
)

// BlockHash identifies a full block by its token ids and by everything
// before it: the first 16 bytes of SHA-256(parent hash ‖ token ids as
// little-endian uint64), where the first block's parent is all zeros. Two
// blocks with equal hashes hold the same tokens at the same positions after
// the same prefix (a collision needs about 2^64 blocks).
type BlockHash [16]byte

// ManagerConfig sizes a BlockManager.
type ManagerConfig struct {
	NumBlocks int // blocks in the pool, ids [0, NumBlocks)
	BlockSize int // token slots per block, 1..MaxBlockSize
	// Watermark is the fraction of NumBlocks that Admit keeps free or
	// evictable after admitting a sequence, in [0, 1); 0 keeps none.
	Watermark float64
	// EnablePrefixCaching makes full computed blocks reusable by later
	// sequences that start with the same tokens.
	EnablePrefixCaching bool
	// Shards > 1 splits the ids into Shards equal ranges, one per rank of
	// a sequence-sharded layout (CSPS), and places a sequence's blocks
	// along the sequence (see shards.go); it must divide NumBlocks.
	// SPTBlocks is the blocks of one sequence partition on one shard.
	Shards, SPTBlocks int
}

// BlockManager hands out the blocks of one KV pool to sequences, counting
// references so that sequences sharing a cached prefix share its blocks.
//
// Every block is in exactly one of three states: in use (refcount > 0,
// possibly cached), evictable (refcount 0, cached: it still holds a full
// block of known tokens and can be reused by a matching prefix), or fresh
// (refcount 0, holding nothing reusable). Allocation takes fresh blocks
// first, then evicts the least recently freed evictable block.
//
// Allocation answers yes or no and never blocks; on no nothing changes. A
// BlockManager is not safe for concurrent use; the scheduler owns it.
type BlockManager struct {
	cfg       ManagerConfig
	watermark int // blocks: int(Watermark·NumBlocks)

	blocks []blockState
	fresh  []int32 // fresh blocks, taken from the end
	// Evictable blocks form a doubly linked list through blockState.prev
	// and next, least recently freed at lruHead; -1 ends it.
	lruHead, lruTail int32
	numLRU           int
	cached           map[BlockHash]int32 // hash → the block holding it

	used    int    // blocks with refcount > 0
	seqs    int    // live sequences
	evicted uint64 // evictions so far: a Prefix from before one may be stale

	queries, hits int64 // prefix-cache lookups of admitted sequences, in tokens

	buf []byte // hashing scratch
}

type blockState struct {
	ref        int32
	hashed     bool // hash is registered in cached
	hash       BlockHash
	prev, next int32 // evictable list links
}

// Seq is one sequence's allocation: its block table and the hashes of its
// full computed blocks. It is created by Admit and ends with Free.
type Seq struct {
	blocks []int
	hashes []BlockHash // of blocks [0, len(hashes)), each full and computed
	root   BlockHash   // the parent of the first block's hash: the salt's (Salted)
	live   bool
}

// Blocks is the sequence's block table: token position p lives in block
// Blocks()[p/BlockSize]. The slice is valid until the next Allocate or Free
// of this sequence and must not be modified.
func (s *Seq) Blocks() []int { return s.blocks[:len(s.blocks):len(s.blocks)] }

// Prefix is the result of Match: the cached blocks a new sequence can start
// with.
type Prefix struct {
	Tokens  int // tokens covered by the matched blocks, a multiple of BlockSize
	blocks  []int32
	hashes  []BlockHash
	root    BlockHash // Salted's
	queried int       // tokens looked up
	evicted uint64    // the manager's eviction count at Match
}

// Salted is the empty prefix of a sequence whose K/V depends on more than
// its tokens (the LoRA adapter it runs with): the hashes of its blocks
// start from salt, so they match only sequences of the same salt. Pass it
// to Admit for a sequence that takes no cached blocks, or to Match. Salt
// 0 is the zero Prefix.
func Salted(salt uint64) Prefix {
	var p Prefix
	binary.LittleEndian.PutUint64(p.root[:], salt)
	return p
}

// NewBlockManager returns a manager with every block fresh.
func NewBlockManager(cfg ManagerConfig) (*BlockManager, error) {
	if cfg.NumBlocks <= 0 || cfg.NumBlocks > 1<<31-1 {
		return nil, fmt.Errorf("kvcache: block count %d outside [1, 2^31)", cfg.NumBlocks)
	}
	if cfg.BlockSize <= 0 || cfg.BlockSize > MaxBlockSize {
		return nil, fmt.Errorf("kvcache: block size %d outside [1, %d]", cfg.BlockSize, MaxBlockSize)
	}
	if !(cfg.Watermark >= 0 && cfg.Watermark < 1) {
		return nil, fmt.Errorf("kvcache: watermark %v outside [0, 1)", cfg.Watermark)
	}
	m := &BlockManager{
		cfg:       cfg,
		watermark: int(cfg.Watermark * float64(cfg.NumBlocks)),
		blocks:    make([]blockState, cfg.NumBlocks),
		fresh:     make([]int32, cfg.NumBlocks),
		lruHead:   -1,
		lruTail:   -1,
		cached:    map[BlockHash]int32{},
		buf:       make([]byte, 0, len(BlockHash{})+8*cfg.BlockSize),
	}
	for i := range m.fresh {
		m.fresh[i] = int32(cfg.NumBlocks - 1 - i) // hand out low ids first
	}
	if err := m.checkShards(); err != nil {
		return nil, err
	}
	return m, nil
}

// Match finds the longest run of cached full blocks at the start of tokens
// (a sequence's known tokens), never including the block that holds the
// last token: at least one token must be computed to produce logits. It
// changes nothing; pass the result to Admit before any other call that may
// evict. With prefix caching off it matches nothing. It is MatchSalted
// with salt 0.
func (m *BlockManager) Match(tokens []int) Prefix { return m.MatchSalted(tokens, 0) }

// MatchSalted is Match among the blocks cached by sequences of salt
// (Salted).
func (m *BlockManager) MatchSalted(tokens []int, salt uint64) Prefix {
	p := Salted(salt)
	p.evicted = m.evicted
	if !m.cfg.EnablePrefixCaching || len(tokens) == 0 {
		return p
	}
	p.queried = len(tokens)
	bs := m.cfg.BlockSize
	parent := p.root
	for i := 0; i < (len(tokens)-1)/bs; i++ {
		h := m.hash(parent, tokens[i*bs:(i+1)*bs])
		b, ok := m.cached[h]
		if !ok {
			break
		}
		p.blocks = append(p.blocks, b)
		p.hashes = append(p.hashes, h)
		parent = h
	}
	p.Tokens = len(p.blocks) * bs
	return p
}

// Admit starts a new sequence on the matched prefix p (the zero Prefix for
// none) with blocks for positions [0, numTokens). It answers no, changing
// nothing, when the blocks are not there, when the admission would leave
// fewer than the watermark's blocks free or evictable while other sequences
// hold blocks (the watermark is headroom for their growth; an idle pool
// admits without it), when numTokens < p.Tokens, or when a block of p has
// been evicted since Match. On yes the prefix-cache counters grow by the
// tokens looked up and the tokens matched.
func (m *BlockManager) Admit(p Prefix, numTokens int) (*Seq, bool) {
	if numTokens < p.Tokens || numTokens <= 0 || (len(p.blocks) > 0 && p.evicted != m.evicted) {
		return nil, false
	}
	need := m.blocksFor(numTokens) - len(p.blocks)
	take := need
	for _, b := range p.blocks {
		if m.blocks[b].ref == 0 {
			take++ // leaves the evictable list
		}
	}
	avail := len(m.fresh) + m.numLRU
	if take > avail || (m.seqs > 0 && avail-take < m.watermark) {
		return nil, false
	}
	s := &Seq{blocks: make([]int, 0, need+len(p.blocks)+1), hashes: slices.Clone(p.hashes), root: p.root, live: true}
	for _, b := range p.blocks {
		st := &m.blocks[b]
		if st.ref == 0 {
			m.lruRemove(b)
			m.used++
		}
		st.ref++
		s.blocks = append(s.blocks, int(b))
	}
	for range need {
		s.blocks = append(s.blocks, m.takeFor(s))
	}
	m.seqs++
	m.queries += int64(p.queried)
	m.hits += int64(p.Tokens)
	return s, true
}

// Allocate grows s's block table to cover positions [0, numTokens). It
// does not check the watermark. It answers no, changing nothing, when too
// few blocks are free or evictable, or when s has been freed.
func (m *BlockManager) Allocate(s *Seq, numTokens int) bool {
	if !s.live {
		return false
	}
	need := m.blocksFor(numTokens) - len(s.blocks)
	if need <= 0 {
		return true
	}
	if need > len(m.fresh)+m.numLRU {
		return false
	}
	for range need {
		s.blocks = append(s.blocks, m.takeFor(s))
	}
	return true
}

// Cache registers s's full blocks among its first numComputed tokens in the
// prefix cache; tokens are the sequence's known tokens (at least
// numComputed). A block whose hash another block already holds stays
// uncached. Without prefix caching it does nothing.
func (m *BlockManager) Cache(s *Seq, tokens []int, numComputed int) {
	if !m.cfg.EnablePrefixCaching || !s.live {
		return
	}
	bs := m.cfg.BlockSize
	full := min(numComputed, len(tokens)) / bs
	full = min(full, len(s.blocks))
	for i := len(s.hashes); i < full; i++ {
		parent := s.root
		if i > 0 {
			parent = s.hashes[i-1]
		}
		h := m.hash(parent, tokens[i*bs:(i+1)*bs])
		s.hashes = append(s.hashes, h)
		st := &m.blocks[s.blocks[i]]
		if st.hashed {
			continue
		}
		if _, dup := m.cached[h]; dup {
			continue
		}
		st.hashed, st.hash = true, h
		m.cached[h] = int32(s.blocks[i])
	}
}

// Free ends s: each of its blocks loses one reference. Blocks left with
// none become evictable if cached (the sequence's last block first, so a
// shared prefix outlives the tails that follow it) and fresh otherwise.
// Freeing twice does nothing.
func (m *BlockManager) Free(s *Seq) {
	if !s.live {
		return
	}
	for i := len(s.blocks) - 1; i >= 0; i-- {
		b := int32(s.blocks[i])
		st := &m.blocks[b]
		st.ref--
		if st.ref > 0 {
			continue
		}
		m.used--
		if st.hashed {
			m.lruPush(b)
		} else {
			m.fresh = append(m.fresh, b)
		}
	}
	s.blocks, s.hashes, s.live = nil, nil, false
	m.seqs--
}

// NumBlocks is the pool size in blocks.
func (m *BlockManager) NumBlocks() int { return m.cfg.NumBlocks }

// BlockSize is the number of token slots per block.
func (m *BlockManager) BlockSize() int { return m.cfg.BlockSize }

// NumFree is the number of blocks an allocation can take: fresh plus
// evictable.
func (m *BlockManager) NumFree() int { return len(m.fresh) + m.numLRU }

// NumUsed is the number of blocks with refcount > 0.
func (m *BlockManager) NumUsed() int { return m.used }

// NumCached is the number of blocks in the prefix cache, in use or
// evictable.
func (m *BlockManager) NumCached() int { return len(m.cached) }

// Usage is the fraction of blocks in use (refcount > 0), in [0, 1]: the
// kv_cache_usage_perc gauge.
func (m *BlockManager) Usage() float64 { return float64(m.used) / float64(m.cfg.NumBlocks) }

// PrefixQueries is the number of tokens looked up in the prefix cache by
// admitted sequences (vLLM's prefix_cache_queries).
func (m *BlockManager) PrefixQueries() int64 { return m.queries }

// PrefixHits is the number of those tokens found cached (vLLM's
// prefix_cache_hits).
func (m *BlockManager) PrefixHits() int64 { return m.hits }

// take hands out one block, fresh if any, else the least recently freed
// evictable one, whose hash it drops. The caller has checked that one is
// there.
func (m *BlockManager) take() int {
	var b int32
	if n := len(m.fresh); n > 0 {
		b = m.fresh[n-1]
		m.fresh = m.fresh[:n-1]
	} else {
		b = m.lruHead
		m.evict(b)
	}
	m.blocks[b].ref = 1
	m.used++
	return int(b)
}

// evict takes evictable block b off the evictable list and out of the
// prefix cache.
func (m *BlockManager) evict(b int32) {
	m.lruRemove(b)
	st := &m.blocks[b]
	delete(m.cached, st.hash)
	st.hashed, st.hash = false, BlockHash{}
	m.evicted++
}

func (m *BlockManager) lruPush(b int32) {
	st := &m.blocks[b]
	st.prev, st.next = m.lruTail, -1
	if m.lruTail >= 0 {
		m.blocks[m.lruTail].next = b
	} else {
		m.lruHead = b
	}
	m.lruTail = b
	m.numLRU++
}

func (m *BlockManager) lruRemove(b int32) {
	st := &m.blocks[b]
	if st.prev >= 0 {
		m.blocks[st.prev].next = st.next
	} else {
		m.lruHead = st.next
	}
	if st.next >= 0 {
		m.blocks[st.next].prev = st.prev
	} else {
		m.lruTail = st.prev
	}
	st.prev, st.next = -1, -1
	m.numLRU--
}

func (m *BlockManager) blocksFor(n int) int { return (n + m.cfg.BlockSize - 1) / m.cfg.BlockSize }

func (m *BlockManager) hash(parent BlockHash, tokens []int) BlockHash {
	b := append(m.buf[:0], parent[:]...)
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint64(b, uint64(t))
	}
	m.buf = b
	sum := sha256.Sum256(b)
	var h BlockHash
	copy(h[:], sum[:])
	return h
}
