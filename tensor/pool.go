package tensor

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of worker goroutines for data-parallel kernels.
//
// The goroutine that calls Run works on its own job alongside the
// Threads()-1 workers, so a pool of T threads keeps at most T goroutines
// busy per call. A nil *Pool runs all work inline on the caller.
//
// A Pool is safe for concurrent use: several goroutines (for example model
// ranks) may call Run on one pool at the same time. Jobs then share the
// workers, and each caller finishes whatever part of its own job no worker
// has picked up, so Run never waits on another caller's work. fn may itself
// call Run on the same pool.
type Pool struct {
	threads int
	jobs    chan *job
	workers sync.WaitGroup
	closed  atomic.Bool
}

// job is one Run call: chunks [0,chunks) of [0,n) claimed through next.
type job struct {
	fn       func(lo, hi int)
	n        int
	chunks   int64
	next     atomic.Int64
	finished atomic.Int64
	refs     atomic.Int32  // goroutines holding the job; the last one recycles it
	done     chan struct{} // receives one value when every chunk has finished
}

var jobCache = sync.Pool{New: func() any { return &job{done: make(chan struct{}, 1)} }}

// NewPool starts a pool of threads workers (counting the caller of Run).
// threads <= 0 means runtime.NumCPU().
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p := &Pool{threads: threads, jobs: make(chan *job, 4*threads)}
	for i := 1; i < threads; i++ {
		p.workers.Add(1)
		go p.work()
	}
	return p
}

// Threads reports how many goroutines Run splits work over: 1 for a nil pool.
func (p *Pool) Threads() int {
	if p == nil {
		return 1
	}
	return p.threads
}

// Close stops the workers and waits for them to exit. It must be called
// after every Run call on the pool has returned; Run after Close executes
// inline on the caller. Close on a nil or already closed pool does nothing.
func (p *Pool) Close() {
	if p == nil || p.closed.Swap(true) {
		return
	}
	close(p.jobs)
	p.workers.Wait()
}

// Run splits [0,n) into at most Threads() contiguous chunks of nearly equal
// size, calls fn(lo, hi) once per chunk, concurrently on the pool's workers
// and the caller, and returns when all calls have returned. Chunks are never
// empty; n <= 0 calls nothing. fn must not panic.
func (p *Pool) Run(n int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if p == nil || p.threads == 1 || n == 1 || p.closed.Load() {
		fn(0, n)
		return
	}
	chunks := min(p.threads, n)
	j := jobCache.Get().(*job)
	j.fn, j.n, j.chunks = fn, n, int64(chunks)
	j.next.Store(0)
	j.finished.Store(0)
	j.refs.Store(1)
	for range chunks - 1 {
		j.refs.Add(1)
		select {
		case p.jobs <- j:
		default:
			// Every worker is busy with queued jobs: the caller does the rest.
			j.refs.Add(-1)
		}
	}
	j.run()
	// The workers' chunks are usually nearly done: poll for them (as the
	// workers poll for jobs) before blocking on done. One yield first lets
	// goroutines readied on this P run (a stream's reader, an HTTP
	// handler): the poll itself does not yield, and a worker polling on the
	// other P leaves none idle to steal them.
	if j.finished.Load() != j.chunks {
		runtime.Gosched()
	}
	// The poll takes done's value itself: the last chunk's finisher sends
	// it just after counting the chunk, and a caller that saw the count
	// and then blocked on done would park for those nanoseconds, leaving
	// its P idle (see spin).
	var start time.Time
	for i := 0; !spun(i, &start); i++ {
		select {
		case <-j.done:
			j.release()
			return
		default:
		}
	}
	<-j.done
	j.release()
}

// spin is how long a worker polls for its next job, and Run's caller for
// the workers' chunks, before blocking. A decode step hands the pool about
// a hundred jobs back to back (every GEMV and attention), split in halves
// of tens of microseconds to a few milliseconds on 2 threads, with at most
// a few hundred microseconds of serial work between them (norms,
// sampling, the engine's bookkeeping). A goroutine that blocks there
// costs more than its own wake-up: its P goes idle, so the next goroutine
// readied (the next job's worker, a stream's reader) makes the runtime
// wake another OS thread to steal it, and on a 2-vCPU VM that thread
// preempts one of the two computing. Polls do not yield either: each
// runtime.Gosched puts the poller on the global run queue, where the Ps
// trade goroutines. Against the previous 50 µs of polls that yielded
// every time, a 110M model's fp32 decode on 2 threads went from about
// 10,900 OS context switches per 200 tokens to 2,700 and ran 4% faster
// (median of 12 interleaved rounds; docs/performance.md). Libgomp's
// default wait policy makes the same trade (its threads spin about
// 300,000 iterations before sleeping).
const spin = time.Millisecond

// work is a worker's loop: help with each job received until Close.
func (p *Pool) work() {
	defer p.workers.Done()
	for {
		j, ok := p.poll()
		if !ok {
			return
		}
		j.run()
		j.release()
	}
}

// poll returns the next job, polling the queue for up to spin before it
// blocks; ok is false once the pool is closed.
func (p *Pool) poll() (j *job, ok bool) {
	var start time.Time
	for i := 0; !spun(i, &start); i++ {
		select {
		case j, ok = <-p.jobs:
			return j, ok
		default:
		}
	}
	j, ok = <-p.jobs
	return j, ok
}

// spun reports, at poll i of a wait that began at *start (which it sets
// at i = 0), whether spin has passed; it reads the clock every 16 polls.
func spun(i int, start *time.Time) bool {
	return i%16 == 0 && clockSpun(i == 0, start)
}

// clockSpun is spun's clock reading.
func clockSpun(first bool, start *time.Time) bool {
	now := time.Now()
	if first {
		*start = now
	}
	return now.Sub(*start) > spin
}

// run claims and executes chunks until none are left.
func (j *job) run() {
	for {
		c := j.next.Add(1) - 1
		if c >= j.chunks {
			return
		}
		lo := int(c * int64(j.n) / j.chunks)
		hi := int((c + 1) * int64(j.n) / j.chunks)
		j.fn(lo, hi)
		if j.finished.Add(1) == j.chunks {
			j.done <- struct{}{}
		}
	}
}

// release drops one reference and recycles the job after the last one.
func (j *job) release() {
	if j.refs.Add(-1) == 0 {
		j.fn = nil
		jobCache.Put(j)
	}
}
