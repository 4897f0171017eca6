package kvcache

import "fmt"

// Sequence-sharded allocation (CSPS, paper 002 §3.2.2): with Shards > 1
// block b belongs to shard b / (NumBlocks/Shards), and a sequence's i-th
// block goes to shard first + min(i/SPTBlocks, Shards−1), where first is
// the shard of its first block, taken on the shard with the most free or
// evictable blocks when the sequence starts. So a prompt of L tokens
// spans ⌈L/(SPTBlocks·BlockSize)⌉ consecutive shards (capped at Shards,
// the last one taking the rest), one contiguous part per shard, and its
// decode tokens land on its last part's shard; a short prompt lives whole
// on one shard. Shards are numbered cyclically from first. When the
// wanted shard has nothing free the block comes from the next shard that
// has, so allocation answers no only when the pool is full; a sequence's
// block table then still says which shard holds each of its tokens.

// checkShards validates the sharding fields.
func (m *BlockManager) checkShards() error {
	c := m.cfg
	if c.Shards <= 1 {
		return nil
	}
	if c.NumBlocks%c.Shards != 0 {
		return fmt.Errorf("kvcache: %d shards do not divide %d blocks", c.Shards, c.NumBlocks)
	}
	if c.SPTBlocks < 1 {
		return fmt.Errorf("kvcache: %d shards need a partition size of at least one block, got %d", c.Shards, c.SPTBlocks)
	}
	return nil
}

// Shard is the shard holding block b (0 without sharding).
func (m *BlockManager) Shard(b int) int {
	if m.cfg.Shards <= 1 {
		return 0
	}
	return b / (m.cfg.NumBlocks / m.cfg.Shards)
}

// takeFor takes a block for the next entry of s's table: where the
// sharding wants it, or as take does without sharding.
func (m *BlockManager) takeFor(s *Seq) int {
	c := m.cfg
	if c.Shards <= 1 {
		return m.take()
	}
	i := len(s.blocks)
	var want int
	if i == 0 {
		want = m.emptiestShard()
	} else {
		want = (m.Shard(s.blocks[0]) + min(i/c.SPTBlocks, c.Shards-1)) % c.Shards
	}
	for k := range c.Shards {
		if b, ok := m.takeIn((want + k) % c.Shards); ok {
			return b
		}
	}
	return m.take()
}

// takeIn takes a fresh block of shard sh, else its least recently freed
// evictable one; false when it has neither.
func (m *BlockManager) takeIn(sh int) (int, bool) {
	per := int32(m.cfg.NumBlocks / m.cfg.Shards)
	lo, hi := int32(sh)*per, int32(sh+1)*per
	for j := len(m.fresh) - 1; j >= 0; j-- {
		if b := m.fresh[j]; b >= lo && b < hi {
			copy(m.fresh[j:], m.fresh[j+1:])
			m.fresh = m.fresh[:len(m.fresh)-1]
			m.blocks[b].ref = 1
			m.used++
			return int(b), true
		}
	}
	for b := m.lruHead; b >= 0; b = m.blocks[b].next {
		if b >= lo && b < hi {
			m.evict(b)
			m.blocks[b].ref = 1
			m.used++
			return int(b), true
		}
	}
	return 0, false
}

// emptiestShard is the shard with the most free or evictable blocks, the
// lowest on ties.
func (m *BlockManager) emptiestShard() int {
	per := m.cfg.NumBlocks / m.cfg.Shards
	free := make([]int, m.cfg.Shards)
	for _, b := range m.fresh {
		free[int(b)/per]++
	}
	for b := m.lruHead; b >= 0; b = m.blocks[b].next {
		free[int(b)/per]++
	}
	best := 0
	for sh, n := range free {
		if n > free[best] {
			best = sh
		}
	}
	return best
}
