package engine

import (
	"context"
	"fmt"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// draftModel proposes drafts with a second, smaller model: speculative
// decoding's "draft_model" method (vLLM's). After each step, every
// sequence that sampled and goes on is brought up to date in the draft
// model's own KV cache (the tokens the target accepted since its last
// proposal, usually one or two) and then decoded greedily for k tokens,
// all sequences batched together: one step for the catch-up and k − 1
// single-token steps, as vLLM's draft runner does. The drafts are the
// draft model's argmax tokens; the engine keeps each with the probability
// the target's sampler gives it, so the output is the target's whatever
// the draft model says.
//
// The draft cache holds, per request, the tokens it has computed: the
// known tokens it has seen and the drafts it fed itself. Known tokens
// only grow, so the next proposal keeps the longest prefix of those that
// the target accepted and recomputes from there: a rejected draft's K/V
// is overwritten in place. Full blocks of known tokens go into the draft
// cache's prefix cache, so requests sharing a prompt share its draft
// K/V too. When the draft cache has no room for a sequence it gets no
// drafts that step (its state is dropped, to be recomputed later); a
// draft step that fails leaves every sequence without drafts for one
// step. Neither changes any output.
//
// The engine's loop goroutine owns everything here but gone, which
// forget appends to under the engine's lock from any goroutine.
type draftModel struct {
	run    Runner
	greedy GreedyRunner // run, when it takes argmaxes itself (on a GPU)
	place  parallel.Placement
	blocks *kvcache.BlockManager
	maxLen int // the draft model's context, in tokens
	budget int // most tokens one draft step runs
	seqs   map[string]*draftSeq
	gone   []string // requests the engine forgot since the last collect; under e.mu

	work   []draftWork
	batch  forward.Batch
	in     []int // batch.Seqs[j] is work[in[j]]'s
	tokens []int // step's argmaxes on the CPU
}

// draftSeq is one request's state in the draft cache.
type draftSeq struct {
	kv       *kvcache.Seq
	computed []int // the tokens whose K/V the draft cache holds, positions [0, len)
	known    int   // computed[:known] are known tokens of the request
}

// draftWork is one sequence's proposal in progress.
type draftWork struct {
	id     string
	known  []int // the scheduler's known tokens; read-only
	k      int   // drafts wanted
	seq    *draftSeq
	feed   []int // tokens to compute next
	drafts []int
}

// newDraftModel checks the draft runner against the target's and sizes
// its KV cache's manager. budget is the target's step budget in tokens.
func newDraftModel(run, target Runner, budget int) (*draftModel, error) {
	cfg, tcfg := run.Config(), target.Config()
	if cfg.Vocab != tcfg.Vocab {
		return nil, fmt.Errorf("engine: the draft model's vocabulary has %d tokens and the target's %d: speculative decoding needs the same vocabulary", cfg.Vocab, tcfg.Vocab)
	}
	places := run.Placements()
	if len(places) == 0 || places[0].Plan.DP != 1 {
		return nil, fmt.Errorf("engine: the draft model needs a runner with one data-parallel replica")
	}
	kv := run.KVLayout()
	blocks, err := kvcache.NewBlockManager(kvcache.ManagerConfig{NumBlocks: kv.NumBlocks, BlockSize: kv.BlockSize, EnablePrefixCaching: true})
	if err != nil {
		return nil, fmt.Errorf("engine: draft model: %w", err)
	}
	d := &draftModel{run: run, place: places[0], blocks: blocks, maxLen: min(cfg.MaxPositions, kv.NumBlocks*kv.BlockSize),
		budget: max(budget, 1), seqs: map[string]*draftSeq{}}
	d.greedy, _ = run.(GreedyRunner)
	return d, nil
}

// collect starts a proposal round: it drops the states of forgotten
// requests and notes that request id, whose known tokens are known, wants
// up to k drafts (fewer where the draft model's context ends). Called
// with e.mu held, reset first.
func (d *draftModel) collect(id string, known []int, k int) {
	k = min(k, d.maxLen-len(known)+1) // the last draft fed is at position len(known)+k−2
	if k > 0 {
		d.work = append(d.work, draftWork{id: id, known: known, k: k})
	}
}

// reset drops the last round's work and the states of forgotten
// requests. Called with e.mu held.
func (d *draftModel) reset() {
	for _, id := range d.gone {
		d.drop(id)
	}
	clear(d.gone)
	d.gone = d.gone[:0]
	clear(d.work)
	d.work = d.work[:0]
}

// drop frees a request's draft cache blocks.
func (d *draftModel) drop(id string) {
	if s, ok := d.seqs[id]; ok {
		d.blocks.Free(s.kv)
		delete(d.seqs, id)
	}
}

// propose runs the draft model for the collected work, leaving each
// item's drafts in work[i].drafts. Called without e.mu.
func (d *draftModel) propose(ctx context.Context) error {
	for i := range d.work {
		if !d.prepare(&d.work[i]) {
			d.work[i].k = 0
		}
	}
	for {
		b := d.batch.Seqs[:0]
		in := d.in[:0]
		left := d.budget
		for i := range d.work {
			w := &d.work[i]
			if len(w.feed) == 0 || w.k == 0 {
				continue
			}
			if left == 0 {
				break
			}
			n := min(len(w.feed), left)
			left -= n
			s := forward.SeqBatch{Tokens: w.feed[:n], Pos: len(w.seq.computed), Blocks: w.seq.kv.Blocks()}
			if n == len(w.feed) {
				s.NumLogits = 1
			}
			b, in = append(b, s), append(in, i)
		}
		d.batch.Seqs, d.in = b, in
		if len(b) == 0 {
			return nil
		}
		tokens, err := d.step(ctx)
		if err != nil {
			clear(d.batch.Seqs)
			return err
		}
		row := 0
		for j, i := range in {
			w := &d.work[i]
			n := len(b[j].Tokens)
			w.seq.computed = append(w.seq.computed, w.feed[:n]...)
			w.feed = w.feed[n:]
			if b[j].NumLogits == 0 {
				continue
			}
			tok := tokens[row]
			row++
			if len(w.seq.computed) == len(w.known) {
				d.blocks.Cache(w.seq.kv, w.known, len(w.known)) // full blocks of known tokens only: never rewritten
			}
			w.drafts = append(w.drafts, tok)
			if len(w.drafts) < w.k {
				w.feed = w.drafts[len(w.drafts)-1:]
			}
		}
		clear(d.batch.Seqs) // drop the references to the known tokens
	}
}

// prepare finds how much of w's known tokens the draft cache holds and
// gives it the blocks for the rest and the drafts; false when the cache
// has no room (the request's state is dropped).
func (d *draftModel) prepare(w *draftWork) bool {
	need := len(w.known) + w.k - 1
	s := d.seqs[w.id]
	if s == nil {
		s = &draftSeq{}
		p := d.blocks.Match(w.known[:len(w.known)-1]) // at least the last token is computed, for its logits
		kv, ok := d.blocks.Admit(p, need)
		if !ok {
			return false
		}
		s.kv, s.known = kv, p.Tokens
		s.computed = append(s.computed, w.known[:p.Tokens]...)
		d.seqs[w.id] = s
	} else {
		p := s.known
		for p < len(s.computed) && p < len(w.known) && s.computed[p] == w.known[p] {
			p++
		}
		p = min(p, len(w.known)-1)
		s.computed, s.known = s.computed[:p], p
		if !d.blocks.Allocate(s.kv, need) {
			d.drop(w.id)
			return false
		}
	}
	w.seq, w.feed = s, w.known[len(s.computed):]
	return true
}

// step runs the batch on the draft runner and returns the argmax of each
// logits row.
func (d *draftModel) step(ctx context.Context) ([]int, error) {
	if d.greedy != nil {
		return d.greedy.StepGreedy(ctx, &d.batch, d.place)
	}
	logits, err := d.run.Step(ctx, &d.batch, d.place)
	if err != nil {
		return nil, err
	}
	vocab := d.run.Config().Vocab
	d.tokens = d.tokens[:0]
	for r := range d.batch.NumLogits() {
		d.tokens = append(d.tokens, tensor.MaxIndex(logits[r*vocab:(r+1)*vocab]))
	}
	return d.tokens, nil
}
