package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/sched"
	"github.com/gearboxlm/gearbox/specdecode"
	"github.com/gearboxlm/gearbox/tensor"
)

// draftRequests are greedy and then seeded requests on the builtin
// model's stories, some sharing a prompt.
func draftRequests(m *model.Model) []Request {
	texts := []string{
		"Once upon a time, there was a little girl named Lily.",
		"Lily and Ben went to the park. They saw a big dog",
		"The cat",
		"The cat",
	}
	reqs := make([]Request, 2*len(texts)) // the greedy ones, then the seeded ones
	for i, text := range texts {
		p := m.Tokenizer.Encode(text, true)
		reqs[i] = Request{ID: fmt.Sprint("greedy", i), Prompt: p, MaxTokens: 50, Sampling: sample.Params{Logprobs: 1}, IgnoreEOS: true}
		reqs[len(texts)+i] = Request{ID: fmt.Sprint("seeded", i), Prompt: p, MaxTokens: 50, IgnoreEOS: i == 0, Sampling: sample.Params{
			Temperature: 0.8, TopP: 0.95, PresencePenalty: 0.3, Seed: int64(i), HasSeed: true, Logprobs: 1}}
	}
	return reqs
}

// checkSameOutputs fails unless got has want's tokens, text, finish
// reasons and log-probabilities.
func checkSameOutputs(t *testing.T, reqs []Request, got, want []*Output) {
	t.Helper()
	for i := range reqs {
		if got[i] == nil {
			t.Fatalf("%s failed", reqs[i].ID)
		}
		if !slices.Equal(got[i].Tokens, want[i].Tokens) || got[i].Text != want[i].Text || got[i].FinishReason != want[i].FinishReason {
			t.Fatalf("%s: speculative %v %q (%s)\nplain       %v %q (%s)", reqs[i].ID, got[i].Tokens, got[i].Text, got[i].FinishReason,
				want[i].Tokens, want[i].Text, want[i].FinishReason)
		}
		for j, lp := range got[i].Logprobs {
			if w := want[i].Logprobs[j]; math.Abs(float64(lp.Logprob-w.Logprob)) > 1e-4 {
				t.Fatalf("%s token %d: logprob %+v, plain %+v", reqs[i].ID, j, lp, w)
			}
		}
	}
}

// TestDraftModelMatchesPlain decodes with drafts from a second model and
// checks that the outputs are those of plain decoding (greedy and seeded
// sampling, log-probabilities included), under one rank and tp=2 and with
// a step budget small enough to split the catch-up; that a draft model
// equal to the target gets nearly every draft accepted and a random one
// few; that a draft KV pool too small for every sequence changes nothing
// but the drafts; and that every draft KV block is free once the
// requests have ended.
// plainBaseline loads the builtin model and serves draftRequests without
// drafts: the outputs speculative runs must equal.
func plainBaseline(t *testing.T) (*model.Model, *tensor.Pool, []Request, []*Output) {
	t.Helper()
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(2)
	t.Cleanup(pool.Close)
	reqs := draftRequests(m)
	plainExec, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return m, pool, reqs, generateAll(t, startEngine(t, plainExec, m.Tokenizer, m.EOS(), sched.Config{}), reqs)
}

// randomDraft writes and loads a random 1-layer model of vocab tokens.
func randomDraft(t *testing.T, vocab int) *model.Model {
	t.Helper()
	dir, err := fixture.Dir(t.TempDir(), fixture.Spec{Vocab: vocab, Layers: 1, Hidden: 32, Heads: 4, MaxPositions: 512, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	d, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestDraftModelMatchesPlain(t *testing.T) {
	m, pool, reqs, want := plainBaseline(t)
	random := randomDraft(t, m.Config.Vocab)
	for _, c := range []struct {
		name        string
		draft       *model.Model
		plan        parallel.Plan
		draftBlocks int // of 16 tokens
		budget      int // the step budget, which the draft steps share
		minAccept   float64
		maxAccept   float64
	}{
		{"self", m, parallel.Single, 64, 0, 0.9, 1},
		{"self tp=2", m, parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 2}, 64, 0, 0.9, 1},
		{"self small budget", m, parallel.Single, 64, 7, 0.9, 1},
		{"random", random, parallel.Single, 64, 0, 0, 0.3},
		{"self small pool", m, parallel.Single, 9, 0, 0.2, 1}, // 144 tokens: a few sequences at a time
	} {
		t.Run(c.name, func(t *testing.T) {
			exec, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 64, Pool: pool,
				Placements: []parallel.Placement{parallel.Standard(c.plan)}})
			if err != nil {
				t.Fatal(err)
			}
			draft, err := cpuexec.NewExecutor(c.draft.Config, c.draft.Weights, cpuexec.Options{NumBlocks: c.draftBlocks, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			e, err := NewEngine(Options{Exec: exec, DraftRunner: draft, Tokenizer: m.Tokenizer, EOS: m.EOS(),
				Speculative: specdecode.Config{Method: specdecode.DraftModel, NumTokens: 4, Model: "x"},
				Sched:       sched.Config{MaxNumBatchedTokens: c.budget}})
			if err != nil {
				t.Fatal(err)
			}
			stop := e.Start()
			// The greedy requests first, alone: their acceptance is the
			// draft model's agreement with the target's argmax.
			greedy := generateAll(t, e, reqs[:len(reqs)/2])
			st := e.Stats()
			seeded := generateAll(t, e, reqs[len(reqs)/2:])
			stop()
			checkSameOutputs(t, reqs, append(greedy, seeded...), want)
			rate := float64(st.AcceptedTokens) / float64(max(st.DraftTokens, 1))
			all := e.Stats()
			t.Logf("greedy: %d of %d drafts accepted (%.2f); all: %d of %d", st.AcceptedTokens, st.DraftTokens, rate, all.AcceptedTokens, all.DraftTokens)
			if st.DraftTokens == 0 || rate < c.minAccept || rate > c.maxAccept || all.DraftTokens == st.DraftTokens {
				t.Errorf("greedy acceptance %.2f of %d drafts, want [%.2f, %.2f]; %d drafts in all", rate, st.DraftTokens, c.minAccept, c.maxAccept, all.DraftTokens)
			}
			if n := e.draft.blocks.NumUsed(); n != 0 || len(e.draft.seqs) != 0 {
				t.Errorf("%d draft KV blocks and %d states still held after every request ended", n, len(e.draft.seqs))
			}
		})
	}
}

// failingRunner is a draft runner whose steps fail from time to time.
type failingRunner struct {
	Runner
	steps atomic.Int64
	every int64
}

var errDraftStep = errors.New("draft step failed (injected)")

func (f *failingRunner) Step(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]float32, error) {
	if f.steps.Add(1)%f.every == 0 {
		return nil, errDraftStep
	}
	return f.Runner.Step(ctx, b, p)
}

// TestDraftModelFailures checks that draft steps that fail cost drafts,
// not outputs, and leave no draft KV block held.
func TestDraftModelFailures(t *testing.T) {
	m, pool, reqs, want := plainBaseline(t)
	exec, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	draft := &failingRunner{Runner: inner, every: 5}
	var logs strings.Builder
	e, err := NewEngine(Options{Exec: exec, DraftRunner: draft, Tokenizer: m.Tokenizer, EOS: m.EOS(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Speculative: specdecode.Config{Method: specdecode.DraftModel, NumTokens: 3, Model: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	stop := e.Start()
	got := generateAll(t, e, reqs)
	stop()
	checkSameOutputs(t, reqs, got, want)
	if st := e.Stats(); st.AcceptedTokens == 0 {
		t.Errorf("no draft accepted")
	}
	if !strings.Contains(logs.String(), errDraftStep.Error()) {
		t.Errorf("the failures were not logged:\n%s", logs.String())
	}
	if n := e.draft.blocks.NumUsed(); n != 0 {
		t.Errorf("%d draft KV blocks still held", n)
	}
}

// TestDraftModelRefused checks NewEngine's checks of a draft model.
func TestDraftModelRefused(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	other := randomDraft(t, m.Config.Vocab+8)
	exec, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 16})
	if err != nil {
		t.Fatal(err)
	}
	wrongVocab, err := cpuexec.NewExecutor(other.Config, other.Weights, cpuexec.Options{NumBlocks: 16})
	if err != nil {
		t.Fatal(err)
	}
	draftModel := specdecode.Config{Method: specdecode.DraftModel, NumTokens: 3, Model: "x"}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Exec: exec, Speculative: draftModel}, "that method needs one"},
		{Options{Exec: exec, DraftRunner: exec, Speculative: specdecode.Config{Method: "ngram", NumTokens: 3}}, "goes with speculative method"},
		{Options{Exec: exec, DraftRunner: exec}, "goes with speculative method"},
		{Options{Exec: exec, DraftRunner: wrongVocab, Speculative: draftModel}, "vocabulary has 520 tokens and the target's 512"},
	} {
		if _, err := NewEngine(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewEngine = %v, want an error containing %q", err, c.want)
		}
	}
}

// greedyContinuation is the oracle of a draft model's proposal: k greedy
// tokens after known, computed from nothing on a fresh runner.
func greedyContinuation(t *testing.T, m *model.Model, pool *tensor.Pool, known []int, k int) []int {
	t.Helper()
	x, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	blocks := make([]int, 64)
	for i := range blocks {
		blocks[i] = i
	}
	place := x.Placements()[0]
	var out []int
	tokens, pos := known, 0
	for range k {
		logits, err := x.Step(context.Background(), &forward.Batch{Seqs: []forward.SeqBatch{{Tokens: tokens, Pos: pos, Blocks: blocks, NumLogits: 1}}}, place)
		if err != nil {
			t.Fatal(err)
		}
		pos += len(tokens)
		out = append(out, tensor.MaxIndex(logits))
		tokens = out[len(out)-1:]
	}
	return out
}

// TestDraftModelProposals drives the draft model as the engine does, with
// the target accepting a random number of each sequence's drafts and
// then choosing a token of its own, and checks every proposal against
// the draft model's greedy continuation computed from nothing: the
// cache's kept prefix, the recomputation after rejections, the prefix
// cache between sequences sharing a prompt and a sequence forgotten and
// started again.
func TestDraftModelProposals(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	pool := tensor.NewPool(2)
	defer pool.Close()
	run, err := cpuexec.NewExecutor(m.Config, m.Weights, cpuexec.Options{NumBlocks: 48, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDraftModel(run, run, 2048)
	if err != nil {
		t.Fatal(err)
	}
	shared := m.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She liked to play", true)
	known := map[string][]int{
		"a": slices.Clone(shared),
		"b": slices.Clone(shared),
		"c": m.Tokenizer.Encode("Tom had a red ball", true),
	}
	seed := uint64(7)
	rnd := func(n int) int { seed = seed*6364136223846793005 + 1442695040888963407; return int(seed>>33) % n }
	for round := range 24 {
		switch round { // as the engine's forget: ended, then a new request of that name
		case 6:
			d.gone = append(d.gone, "c")
			known["c"] = m.Tokenizer.Encode("Tom had a", true)
		case 12:
			d.gone = append(d.gone, "b")
			known["b"] = slices.Clone(known["a"]) // a's full blocks of known tokens are cached by now
		}
		d.reset()
		for _, id := range []string{"a", "b", "c"} {
			d.collect(id, known[id], 4)
		}
		if err := d.propose(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, w := range d.work {
			want := greedyContinuation(t, m, pool, w.known, w.k)
			if !slices.Equal(w.drafts, want) {
				t.Fatalf("round %d, %s after %d tokens: drafts %v, greedy %v", round, w.id, len(w.known), w.drafts, want)
			}
			// The target keeps a random prefix of the drafts, then its own
			// token, which differs from the next draft.
			a := rnd(len(w.drafts) + 1)
			next := rnd(m.Config.Vocab)
			if a < len(w.drafts) && next == w.drafts[a] {
				next = (next + 1) % m.Config.Vocab
			}
			known[w.id] = append(append(known[w.id], w.drafts[:a]...), next)
		}
	}
	if d.blocks.PrefixHits() == 0 {
		t.Error("the sequences sharing a prompt shared no draft KV block")
	}
	d.gone = append(d.gone, "a", "b", "c")
	d.reset()
	if n := d.blocks.NumUsed(); n != 0 || len(d.seqs) != 0 {
		t.Errorf("%d blocks and %d states held after every request ended", n, len(d.seqs))
	}
}
