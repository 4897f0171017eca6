package engine

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sample"
)

// oneRank is the part of a test runner that computes no model: one rank,
// a 64-block pool of 16-token blocks.
type oneRank struct{ cfg *model.Config }

func (o oneRank) Config() *model.Config { return o.cfg }
func (o oneRank) Placements() []parallel.Placement {
	return []parallel.Placement{parallel.Standard(parallel.Single)}
}
func (o oneRank) KVLayout() kvcache.Layout {
	return kvcache.Layout{Layers: 1, KVHeads: 1, HeadDim: 1, BlockSize: 16, NumBlocks: 64}
}

// fixedRunner computes no model: every logits row has its maximum at
// token next, and each step advances the clock by a millisecond.
type fixedRunner struct {
	oneRank
	clk   *clock.Fake
	next  int
	steps int
}

func (f *fixedRunner) PlanSteps() map[string]int { return map[string]int{"single": f.steps} }
func (f *fixedRunner) Step(_ context.Context, b *forward.Batch, _ parallel.Placement) ([]float32, error) {
	f.steps++
	f.clk.Advance(time.Millisecond)
	out := make([]float32, b.NumLogits()*f.cfg.Vocab)
	for r := 0; r < b.NumLogits(); r++ {
		out[r*f.cfg.Vocab+f.next] = 1
	}
	return out, nil
}

func fixedEngine(t *testing.T, eos []int, onEvent func(*Stream)) (*Engine, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Unix(0, 0))
	cfg := &model.Config{Vocab: 32, MaxPositions: 256, BOS: -1}
	e, err := NewEngine(Options{Exec: &fixedRunner{oneRank: oneRank{cfg}, clk: clk, next: 5}, EOS: eos, Clock: clk, OnEvent: onEvent})
	if err != nil {
		t.Fatal(err)
	}
	return e, clk
}

// drive runs the engine one iteration at a time, as the simulator does,
// until it has nothing to run.
func drive(t *testing.T, e *Engine) int {
	t.Helper()
	steps := 0
	for {
		ran, err := e.Iterate(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !ran {
			return steps
		}
		steps++
	}
}

// TestNoTokenizer: without a tokenizer the engine generates token ids and
// no text, still ends on EOS and the length limit, and refuses stop
// strings, which it could not find.
func TestNoTokenizer(t *testing.T) {
	var named []*Stream
	e, clk := fixedEngine(t, []int{5}, func(s *Stream) { named = append(named, s) })
	greedy := sample.Params{Logprobs: -1}
	long, err := e.Submit(Request{Prompt: []int{1, 2, 3}, MaxTokens: 4, IgnoreEOS: true, Sampling: greedy, Stop: []string{""}})
	if err != nil {
		t.Fatal(err)
	}
	eos, err := e.Submit(Request{Prompt: []int{1, 2}, MaxTokens: 4, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(Request{Prompt: []int{1}, MaxTokens: 4, Sampling: greedy, Stop: []string{"\n"}}); !errors.Is(err, ErrNoTokenizer) {
		t.Fatalf("stop string without a tokenizer: %v, want ErrNoTokenizer", err)
	}
	if steps := drive(t, e); steps != 4 {
		t.Fatalf("%d steps, want 4", steps)
	}
	if clk.Now() != time.Unix(0, 0).Add(4*time.Millisecond) {
		t.Fatalf("clock at %v", clk.Now())
	}

	read := func(s *Stream) (tokens []int, last Event) {
		for {
			ev, ok := s.TryRecv()
			if !ok {
				return tokens, last
			}
			if ev.Text != "" {
				t.Fatalf("event with text %q without a tokenizer", ev.Text)
			}
			tokens = append(tokens, ev.Tokens...)
			last = ev
		}
	}
	tokens, last := read(long)
	if len(tokens) != 4 || last.Finish != FinishLength || last.Usage != (Usage{PromptTokens: 3, CompletionTokens: 4}) {
		t.Fatalf("ignore_eos request: tokens %v, last %+v", tokens, last)
	}
	tokens, last = read(eos)
	if len(tokens) != 1 || tokens[0] != 5 || last.Finish != FinishStop {
		t.Fatalf("EOS request: tokens %v, last %+v", tokens, last)
	}
	if _, err := long.Recv(context.Background()); err != io.EOF {
		t.Fatalf("Recv after the final event: %v, want io.EOF", err)
	}
	// OnEvent named a stream once per event: four for one, one for the other.
	count := map[*Stream]int{}
	for _, s := range named {
		count[s]++
	}
	if len(named) != 5 || count[long] != 4 || count[eos] != 1 {
		t.Fatalf("OnEvent named %d streams: %d × the long request, %d × the EOS one", len(named), count[long], count[eos])
	}
}

// TestTryRecv: TryRecv never waits, returns events in order and nothing
// after the final one, and mixes with Recv.
func TestTryRecv(t *testing.T) {
	s := newStream("r")
	if _, ok := s.TryRecv(); ok {
		t.Fatal("TryRecv on an empty stream returned an event")
	}
	s.push(Event{Tokens: []int{1}})
	s.push(Event{Tokens: []int{2}})
	if ev, ok := s.TryRecv(); !ok || ev.Tokens[0] != 1 {
		t.Fatalf("first: %+v %v", ev, ok)
	}
	s.push(Event{Tokens: []int{3}, Finish: FinishLength})
	s.push(Event{Tokens: []int{4}}) // after the final event: dropped
	if ev, err := s.Recv(context.Background()); err != nil || ev.Tokens[0] != 2 {
		t.Fatalf("second: %+v %v", ev, err)
	}
	if ev, ok := s.TryRecv(); !ok || ev.Tokens[0] != 3 || ev.Finish != FinishLength {
		t.Fatalf("final: %+v %v", ev, ok)
	}
	if ev, ok := s.TryRecv(); ok {
		t.Fatalf("after the final event: %+v", ev)
	}
	if _, err := s.Recv(context.Background()); err != io.EOF {
		t.Fatalf("Recv after the final event: %v", err)
	}
}
