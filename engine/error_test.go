package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/sample"
)

// flakyRunner fails its first step and returns zero logits after.
type flakyRunner struct {
	oneRank
	calls int
}

func (f *flakyRunner) PlanSteps() map[string]int { return nil }
func (f *flakyRunner) Step(_ context.Context, b *forward.Batch, _ parallel.Placement) ([]float32, error) {
	f.calls++
	if f.calls == 1 {
		return nil, errors.New("device lost")
	}
	return make([]float32, b.NumLogits()*f.cfg.Vocab), nil
}

// syncBuffer is a log sink safe for the engine goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStepErrorEndsRequestsAndIsLogged: a failed step ends its requests
// with FinishError carrying the cause, the failure is logged, and the loop
// goes on serving.
func TestStepErrorEndsRequestsAndIsLogged(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	e, err := NewEngine(Options{Exec: &flakyRunner{oneRank: oneRank{m.Config}}, Tokenizer: m.Tokenizer, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Start()()
	req := Request{Prompt: m.Tokenizer.Encode("Once upon a time", true), MaxTokens: 2, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}
	out, err := e.Generate(context.Background(), req, nil)
	if err == nil && out.FinishReason != FinishError {
		t.Fatalf("first request: %+v, %v; want an error finish", out, err)
	}
	out, err = e.Generate(context.Background(), req, nil)
	if err != nil || out.FinishReason != FinishLength || len(out.Tokens) != 2 {
		t.Fatalf("second request: %+v, %v", out, err)
	}
	// The loop logged the failure before it ran the second request's steps.
	if !strings.Contains(logs.String(), "engine step failed") || !strings.Contains(logs.String(), "device lost") {
		t.Fatalf("log: %q", logs.String())
	}
}

// finishCounter counts the Observer's Finish calls by reason.
type finishCounter struct {
	mu      sync.Mutex
	reasons map[string]int
}

func (f *finishCounter) Step(StepStats)                {}
func (f *finishCounter) FirstToken(_, _ time.Duration) {}
func (f *finishCounter) Token(time.Duration)           {}
func (f *finishCounter) Finish(s FinishStats)          { f.mu.Lock(); f.reasons[s.Reason]++; f.mu.Unlock() }
func (f *finishCounter) count(reason string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reasons[reason]
}

// TestStepErrorIsObserved: a request ended by a failed step reaches the
// Observer as every other finish does (the server's
// request_success_total{finished_reason="error"}).
func TestStepErrorIsObserved(t *testing.T) {
	m, err := model.LoadFS(builtin.FS(), builtin.Name)
	if err != nil {
		t.Fatal(err)
	}
	obs := &finishCounter{reasons: map[string]int{}}
	e, err := NewEngine(Options{Exec: &flakyRunner{oneRank: oneRank{m.Config}}, Tokenizer: m.Tokenizer, Observer: obs,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Start()()
	req := Request{Prompt: m.Tokenizer.Encode("Once upon a time", true), MaxTokens: 2, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}}
	if _, err := e.Generate(context.Background(), req, nil); err == nil {
		t.Fatal("the first request succeeded; its step fails")
	}
	if _, err := e.Generate(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	if got := obs.count(FinishError); got != 1 {
		t.Errorf("%d error finishes observed, want 1", got)
	}
	if got := obs.count(FinishLength); got != 1 {
		t.Errorf("%d length finishes observed, want 1", got)
	}
}
