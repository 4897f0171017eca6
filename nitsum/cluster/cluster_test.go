package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/engine"
	"github.com/gearboxlm/gearbox/internal/fixture"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/nitsum"
	"github.com/gearboxlm/gearbox/sample"
	"github.com/gearboxlm/gearbox/slo"
	"github.com/gearboxlm/gearbox/tensor"
)

// tiny is the fixture model every test serves: 8 query and 4 KV heads,
// so TP 1, 2 and 4 all split the KV heads.
var tiny = fixture.Spec{Heads: 8, KVHeads: 4, Layers: 2, Hidden: 64, Intermediate: 96, MaxPositions: 128, Seed: 3003}

type testModel struct {
	cfg *model.Config
	w   *model.Weights
}

var loaded struct {
	once sync.Once
	m    testModel
	err  error
}

func loadTiny(t testing.TB) testModel {
	t.Helper()
	loaded.once.Do(func() {
		dir, err := fixture.Dir(t.TempDir(), tiny)
		if err != nil {
			loaded.err = err
			return
		}
		m, err := model.Load(dir, model.Options{DType: model.Float32})
		if err != nil {
			loaded.err = err
			return
		}
		loaded.m = testModel{m.Config, m.Weights}
	})
	if loaded.err != nil {
		t.Fatal(loaded.err)
	}
	return loaded.m
}

func tiers(t testing.TB) *slo.Set {
	t.Helper()
	s, err := slo.New([]slo.Tier{
		{Name: "strict", TTFT: 300 * time.Millisecond, TPOT: 10 * time.Millisecond, Default: true},
		{Name: "loose", TTFT: 300 * time.Millisecond, TPOT: 20 * time.Millisecond},
		{Name: "batch", Background: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// profile is a hand-built capacity table in which TP2 serves more per
// rank than TP1 (M4: small-batch decode per GPU rises with TP).
func profile() nitsum.Profile {
	row := func(x float64) []nitsum.Capacity {
		return []nitsum.Capacity{
			{Prefill: x, Decode: x, PrefillBatch: 4, DecodeBatch: 8},
			{Prefill: 2.5 * x, Decode: 2.5 * x, PrefillBatch: 4, DecodeBatch: 8},
			{Prefill: 4 * x, Decode: 4 * x, PrefillBatch: 4, DecodeBatch: 8},
		}
	}
	return nitsum.Profile{TP: []int{1, 2, 4}, Cap: [][]nitsum.Capacity{row(10), row(20), nil}}
}

// layout is instances of the given degrees in rank order, all serving the
// default tier with a bandwidth of capacity requests.
func layout(capacity int, degrees ...int) []nitsum.Instance {
	var out []nitsum.Instance
	first := 0
	for _, t := range degrees {
		out = append(out, nitsum.Instance{Tier: 0, Role: nitsum.Prefill, TP: t, FirstGPU: first, Capacity: capacity, Background: true})
		first += t
	}
	return out
}

func newCluster(t testing.TB, ranks int, l []nitsum.Instance, manual bool, mod func(*Options)) *Cluster {
	t.Helper()
	m := loadTiny(t)
	pool := tensor.NewPool(2)
	t.Cleanup(pool.Close)
	opts := Options{
		Config: m.cfg, Weights: m.w, Ranks: ranks, Tiers: tiers(t), Profile: profile(), Layout: l,
		BlockSize: 4, NumBlocks: 64, Pool: pool, Manual: manual, Window: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mod != nil {
		mod(&opts)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func requests(n, maxTokens int, vocab int) []engine.Request {
	var out []engine.Request
	for i := range n {
		out = append(out, engine.Request{ID: fmt.Sprint("r", i), Prompt: fixture.Tokens(700+i, 3+(5*i)%11, vocab),
			MaxTokens: maxTokens + i%5, IgnoreEOS: true, Sampling: sample.Params{Logprobs: -1}})
	}
	return out
}

// reference is each request's greedy tokens served alone on one rank.
func reference(t testing.TB, reqs []engine.Request) [][]int {
	t.Helper()
	m := loadTiny(t)
	x, err := cpuexec.NewExecutor(m.cfg, m.w, cpuexec.Options{BlockSize: 4, NumBlocks: 64})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.NewEngine(engine.Options{Exec: x})
	if err != nil {
		t.Fatal(err)
	}
	stop := e.Start()
	defer stop()
	out := make([][]int, len(reqs))
	for i, r := range reqs {
		o, err := e.Generate(context.Background(), r, nil)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = o.Tokens
	}
	return out
}

// collect reads a stream to its end: its tokens, the final reason, and
// an error if any event came after the final one or tokens repeat their
// positions (a stream delivers each token once, in order).
func collect(ctx context.Context, st *engine.Stream) ([]int, string, error) {
	var toks []int
	finish := ""
	for {
		ev, err := st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return toks, finish, nil
		}
		if err != nil {
			return toks, finish, err
		}
		if finish != "" {
			return toks, finish, fmt.Errorf("event after the final one %q", finish)
		}
		toks = append(toks, ev.Tokens...)
		if ev.Usage.CompletionTokens != len(toks) {
			return toks, finish, fmt.Errorf("usage says %d completion tokens after %d delivered", ev.Usage.CompletionTokens, len(toks))
		}
		finish = ev.Finish
	}
}

// TestMixedDegrees serves requests through instances of different TP
// degree running at once (TP1+TP1+TP2 and TP2+TP1+TP1 on 4 ranks, each
// instance its own engine, scheduler and KV pool, loops on their own
// goroutines): every request's greedy tokens equal its tokens alone on
// one rank, every request ends once, and every instance served some.
func TestMixedDegrees(t *testing.T) {
	m := loadTiny(t)
	reqs := requests(12, 6, m.cfg.Vocab)
	want := reference(t, reqs)
	for _, degrees := range [][]int{{1, 1, 2}, {2, 1, 1}} {
		t.Run(fmt.Sprint(degrees), func(t *testing.T) {
			c := newCluster(t, 4, layout(2, degrees...), false, nil)
			got, errs, done := submitAll(t, c, reqs)
			<-done
			<-c.Drain() // a stream's final event comes just before its completion is counted
			checkOutputs(t, reqs, got, errs, want)
			st := c.Stats()
			if st.Finished != int64(len(reqs)) {
				t.Errorf("%d finished, want %d", st.Finished, len(reqs))
			}
			if d := c.disp.Load(); d.InFlight() != 0 {
				t.Errorf("%d requests still in flight in the dispatcher", d.InFlight())
			}
			c.mu.Lock()
			for _, in := range c.insts {
				if n := in.exec.PlanSteps(); len(n) == 0 {
					t.Errorf("instance tp%d@%d ran no step", in.spec.TP, in.spec.FirstGPU)
				}
			}
			c.mu.Unlock()
		})
	}
}

// TestSubmitNoInstance: a background request while no instance accepts
// background work is refused as a full queue (the server's 429, retried),
// and the dispatcher keeps nothing of it.
func TestSubmitNoInstance(t *testing.T) {
	l := layout(4, 1, 1)
	for i := range l {
		l[i].Background = false
	}
	c := newCluster(t, 2, l, true, nil)
	req := requests(1, 4, loadTiny(t).cfg.Vocab)[0]
	req.Tier = "batch"
	_, err := c.Submit(req)
	if !errors.Is(err, engine.ErrQueueFull) || !errors.Is(err, nitsum.ErrNoInstance) {
		t.Fatalf("background request with no background instance: %v", err)
	}
	req.Tier = ""
	if _, err := c.Submit(req); err != nil {
		t.Fatalf("the same ID for the default tier after the refusal: %v", err)
	}
}

// submitAll submits reqs to c and collects each stream on its own
// goroutine; done is closed once every stream has ended, and then got[i]
// holds request i's tokens and errs[i] its error (one for a finish other
// than the length limit).
func submitAll(t *testing.T, c *Cluster, reqs []engine.Request) (got [][]int, errs []error, done <-chan struct{}) {
	t.Helper()
	got, errs = make([][]int, len(reqs)), make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		st, err := c.Submit(r)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			var fin string
			got[i], fin, errs[i] = collect(context.Background(), st)
			if errs[i] == nil && fin != engine.FinishLength {
				errs[i] = fmt.Errorf("finish %q, want length", fin)
			}
		})
	}
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	return got, errs, ch
}

// checkOutputs fails the test for any request that ended in an error and
// reports any whose tokens differ from want's (each alone on one rank).
func checkOutputs(t *testing.T, reqs []engine.Request, got [][]int, errs []error, want [][]int) {
	t.Helper()
	for i := range reqs {
		if errs[i] != nil {
			t.Fatalf("%s: %v", reqs[i].ID, errs[i])
		}
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("%s: %v, alone on one rank %v", reqs[i].ID, got[i], want[i])
		}
	}
}
