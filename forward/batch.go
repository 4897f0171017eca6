package forward

import "fmt"

// SeqBatch is one sequence's share of a step: a prefill chunk or a single
// decode token, against the sequence's paged KV.
type SeqBatch struct {
	Tokens    []int // token ids to run, at positions Pos, Pos+1, …
	Pos       int   // tokens of this sequence already in the KV cache
	Blocks    []int // block table; must cover positions [0, Pos+len(Tokens))
	NumLogits int   // logits wanted for this many trailing tokens (0, 1 = last, len(Tokens) = all)
	Replica   int   // data-parallel replica holding the sequence's KV (0 without DP)
	// Adapter is the LoRA adapter the sequence runs with: 0 for the base
	// model, i for the runner's i-th adapter (package lora).
	Adapter int
}

// Batch is one step: the sequences' chunks flattened into one token batch.
type Batch struct {
	Seqs []SeqBatch
	// Hidden asks a runner that keeps them (engine.HiddenRunner) for the
	// final-norm hidden state of every logits row too, the input of the
	// LM head: embeddings.
	Hidden bool
}

// NumTokens is the number of tokens the step runs.
func (b *Batch) NumTokens() int {
	n := 0
	for _, s := range b.Seqs {
		n += len(s.Tokens)
	}
	return n
}

// NumLogits is the number of logits rows the step returns.
func (b *Batch) NumLogits() int {
	n := 0
	for _, s := range b.Seqs {
		n += s.NumLogits
	}
	return n
}

// Validate checks the batch against the vocabulary, context length, KV
// block geometry and data-parallel replicas of a runner.
func (b *Batch) Validate(vocab, maxPos, blockSize, numBlocks, replicas int) error {
	if len(b.Seqs) == 0 {
		return fmt.Errorf("engine: empty batch")
	}
	for i, s := range b.Seqs {
		if len(s.Tokens) == 0 {
			return fmt.Errorf("engine: sequence %d has no tokens", i)
		}
		if s.Replica < 0 || s.Replica >= replicas {
			return fmt.Errorf("engine: sequence %d: replica %d outside [0, %d)", i, s.Replica, replicas)
		}
		if s.Pos < 0 || s.NumLogits < 0 || s.NumLogits > len(s.Tokens) {
			return fmt.Errorf("engine: sequence %d: bad position %d or logits count %d", i, s.Pos, s.NumLogits)
		}
		end := s.Pos + len(s.Tokens)
		if end > maxPos {
			return fmt.Errorf("engine: sequence %d reaches position %d beyond the context length %d", i, end, maxPos)
		}
		if need := (end + blockSize - 1) / blockSize; len(s.Blocks) < need {
			return fmt.Errorf("engine: sequence %d needs %d KV blocks for %d tokens, has %d", i, need, end, len(s.Blocks))
		}
		for _, blk := range s.Blocks {
			if blk < 0 || blk >= numBlocks {
				return fmt.Errorf("engine: sequence %d: block id %d outside [0, %d)", i, blk, numBlocks)
			}
		}
		for _, t := range s.Tokens {
			if t < 0 || t >= vocab {
				return fmt.Errorf("engine: sequence %d: token id %d outside the vocabulary [0, %d)", i, t, vocab)
			}
		}
	}
	return nil
}

// Swap is a set of KV blocks of one data-parallel replica to copy between
// the device KV cache and the host KV store: Device[i] ↔ Host[i].
type Swap struct {
	Replica      int
	Device, Host []int
}
