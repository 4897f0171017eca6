package rankproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/cpuexec"
	"github.com/gearboxlm/gearbox/forward"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/model"
	"github.com/gearboxlm/gearbox/parallel"
)

// ErrShutdown is Follow's result when the driver ended the job normally.
var ErrShutdown = errors.New("rankproc: the driver shut down")

// Driver is process 0's Runner: each Step runs on every process of the
// job. It is used by one goroutine at a time (the engine's), beside its
// own pinger.
type Driver struct {
	x   *cpuexec.Executor
	m   *comm.MPI
	log *slog.Logger

	mu     sync.Mutex // one step at a time
	buf    []byte     // the step's payload
	in     []byte     // a follower's reply
	closed bool

	sendMu sync.Mutex // one message to the followers at a time (steps' and pings')
	last   time.Time  // when the followers last heard from the driver

	failed   chan struct{}
	failOnce sync.Once
	err      error
	stop     chan struct{} // ends the pinger
	stopOnce sync.Once
	pinged   chan struct{} // closed when the pinger has returned
}

// NewDriver returns the driver of x, whose World comes from m (the
// executor was built with Options.World = m.NewWorld), on process 0.
func NewDriver(x *cpuexec.Executor, m *comm.MPI, log *slog.Logger) (*Driver, error) {
	if m.Rank() != 0 {
		return nil, fmt.Errorf("rankproc: the driver runs on process 0, not %d", m.Rank())
	}
	if log == nil {
		log = slog.Default()
	}
	d := &Driver{x: x, m: m, log: log, last: time.Now(), failed: make(chan struct{}), stop: make(chan struct{}), pinged: make(chan struct{})}
	go d.ping()
	return d, nil
}

// Config is the model's configuration.
func (d *Driver) Config() *model.Config { return d.x.Config() }

// Placements are the executor's.
func (d *Driver) Placements() []parallel.Placement { return d.x.Placements() }

// KVLayout is the executor's.
func (d *Driver) KVLayout() kvcache.Layout { return d.x.KVLayout() }

// PlanSteps counts the steps run under each placement.
func (d *Driver) PlanSteps() map[string]int { return d.x.PlanSteps() }

// CommStats is rank 0's byte counters.
func (d *Driver) CommStats() comm.Stats { return d.x.CommStats() }

// Done is closed when the job has failed; Err says why.
func (d *Driver) Done() <-chan struct{} { return d.failed }

// Err is the failure that ended the job, nil while it runs.
func (d *Driver) Err() error {
	select {
	case <-d.failed:
		return d.err
	default:
		return nil
	}
}

// fail records the first failure, tells every process through the
// transport's abort and closes Done.
func (d *Driver) fail(err error) error {
	d.failOnce.Do(func() {
		d.err = err
		d.m.Abort(err)
		d.log.Error("rank processes failed", "err", err)
		close(d.failed)
	})
	return d.err
}

// Step sends the step to every follower, runs rank 0 and gathers the
// followers' logits rows into the result. Any failure fails the job:
// this and every later Step return it.
func (d *Driver) Step(ctx context.Context, b *forward.Batch, p parallel.Placement) ([]float32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.Err(); err != nil {
		return nil, err
	}
	if d.closed {
		return nil, errors.New("rankproc: driver closed")
	}
	d.buf = encodeStep(d.buf[:0], p.Name, b)
	if err := d.tell(ctx, kindStep, d.buf); err != nil {
		return nil, d.fail(err)
	}
	out, err := d.x.Step(ctx, b, p)
	if err != nil {
		return nil, d.fail(err)
	}
	vocab := d.x.Config().Vocab
	n := rowsLen(b.NumLogits(), vocab)
	if cap(d.in) < n {
		d.in = make([]byte, n)
	}
	for r := 1; r < d.m.Size(); r++ {
		if err := d.gather(ctx, r, out, vocab); err != nil {
			return nil, d.fail(fmt.Errorf("rankproc: logits of process %d: %w", r, err))
		}
	}
	return out, nil
}

// gather receives follower r's logits rows into out. While it computes,
// the follower says it is alive every quarter timeout; each wait is
// bounded by the timeout.
func (d *Driver) gather(ctx context.Context, r int, out []float32, vocab int) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, d.m.Timeout())
		got, err := d.m.RecvBytes(wctx, d.in[:cap(d.in)], r, tagLogits)
		cancel()
		switch {
		case err != nil:
			return err
		case got == 1 && d.in[0] == replyAlive:
			continue
		case got > 1 && d.in[0] == replyRows:
			return decodeRows(d.in[1:got], out, vocab)
		default:
			return fmt.Errorf("rankproc: reply of %d bytes, kind %d", got, d.in[0])
		}
	}
}

// tell sends one message to every follower, each send bounded by the
// timeout.
func (d *Driver) tell(ctx context.Context, kind byte, payload []byte) error {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	h := header(kind, len(payload))
	for r := 1; r < d.m.Size(); r++ {
		wctx, cancel := context.WithTimeout(ctx, d.m.Timeout())
		err := d.m.SendBytes(wctx, h, r, tagHeader)
		if err == nil && len(payload) > 0 {
			err = d.m.SendBytes(wctx, payload, r, tagPayload)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("rankproc: sending to process %d: %w", r, err)
		}
	}
	d.last = time.Now()
	return nil
}

// ping tells the followers that process 0 lives whenever it has sent
// them nothing for an eighth of the timeout (checked every quarter): while
// the engine is idle, and while process 0 computes a step longer than
// that (its replica's long prefill under DP) and a follower, done with its
// part, waits for the next step.
func (d *Driver) ping() {
	defer close(d.pinged)
	every := d.m.Timeout() / 4
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-d.failed:
			return
		case <-t.C:
		}
		d.sendMu.Lock()
		quiet := time.Since(d.last) >= every/2
		d.sendMu.Unlock()
		var err error
		if quiet {
			err = d.tell(context.Background(), kindPing, nil)
		}
		if err != nil {
			d.fail(err)
			return
		}
	}
}

// Close tells the followers that no more steps come (they return
// ErrShutdown from Follow) and stops the pinger. It does not close the
// MPI transport.
func (d *Driver) Close() error {
	d.stopOnce.Do(func() { close(d.stop) })
	<-d.pinged
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	if err := d.Err(); err != nil {
		return err
	}
	if err := d.tell(context.Background(), kindShutdown, nil); err != nil {
		return d.fail(err)
	}
	return nil
}

// Follow runs the steps process 0's Driver sends, on x (built with
// Options.World = m.NewWorld, the same model, options and placements as
// process 0's), until the driver shuts down (ErrShutdown) or anything
// fails: a step's error, or no message from process 0 within the
// transport's timeout. A failure aborts the transport, which tells the
// other processes.
func Follow(ctx context.Context, x *cpuexec.Executor, m *comm.MPI, log *slog.Logger) error {
	if m.Rank() == 0 {
		return errors.New("rankproc: process 0 drives; it does not follow")
	}
	if log == nil {
		log = slog.Default()
	}
	fail := func(err error) error {
		m.Abort(err)
		return err
	}
	placements := map[string]parallel.Placement{}
	for _, p := range x.Placements() {
		placements[p.Name] = p
	}
	h := make([]byte, headerLen)
	var payload, out []byte
	for {
		wctx, cancel := context.WithTimeout(ctx, m.Timeout())
		n, err := m.RecvBytes(wctx, h, 0, tagHeader)
		var kind byte
		var size int
		if err == nil {
			kind, size, err = parseHeader(h[:n])
		}
		if err == nil && size > 0 {
			if cap(payload) < size {
				payload = make([]byte, size)
			}
			_, err = m.RecvBytes(wctx, payload[:size], 0, tagPayload)
		}
		cancel()
		if err != nil {
			return fail(fmt.Errorf("rankproc: process %d: no message from process 0 within %v: %w", m.Rank(), m.Timeout(), err))
		}
		switch kind {
		case kindPing:
			continue
		case kindShutdown:
			return ErrShutdown
		case kindStep:
		default:
			return fail(fmt.Errorf("rankproc: process %d: message kind %d", m.Rank(), kind))
		}
		name, b, err := decodeStep(payload[:size])
		if err != nil {
			return fail(err)
		}
		p, ok := placements[name]
		if !ok {
			return fail(fmt.Errorf("rankproc: process %d holds no placement %q", m.Rank(), name))
		}
		stop := aliveWhile(ctx, m)
		logits, err := x.Step(ctx, b, p)
		if aerr := stop(); err == nil {
			err = aerr
		}
		if err != nil {
			return fail(fmt.Errorf("rankproc: process %d: %w", m.Rank(), err))
		}
		out = encodeRows(append(out[:0], replyRows), x.HostedRows(), logits, x.Config().Vocab)
		wctx, cancel = context.WithTimeout(ctx, m.Timeout())
		err = m.SendBytes(wctx, out, 0, tagLogits)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("rankproc: process %d: sending logits: %w", m.Rank(), err))
		}
		log.Debug("step", "placement", name, "tokens", b.NumTokens())
	}
}

// aliveWhile tells process 0, every quarter timeout until stop is called,
// that this follower is still computing its step, so that process 0,
// done with its own part, keeps waiting for the logits. stop returns the
// first send's error, after which no more are sent.
func aliveWhile(ctx context.Context, m *comm.MPI) (stop func() error) {
	quit, done := make(chan struct{}), make(chan error, 1)
	go func() {
		t := time.NewTicker(m.Timeout() / 4)
		defer t.Stop()
		msg := []byte{replyAlive}
		for {
			select {
			case <-quit:
				done <- nil
				return
			case <-t.C:
			}
			wctx, cancel := context.WithTimeout(ctx, m.Timeout())
			err := m.SendBytes(wctx, msg, 0, tagLogits)
			cancel()
			if err != nil {
				done <- fmt.Errorf("rankproc: telling process 0 this step is still running: %w", err)
				return
			}
		}
	}()
	return func() error {
		close(quit)
		return <-done
	}
}
