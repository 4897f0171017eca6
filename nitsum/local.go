package nitsum

import (
	"fmt"
	"sync"
)

// numClasses is the number of Class values, one local queue each.
const numClasses = 3

// Local is one instance's local scheduler queues (§3.3.2, L1–L4): the
// requests the global scheduler placed on it, in three first-come,
// first-served queues by class. Each iteration the engine takes the next
// batch from it. It is safe for concurrent use: the dispatcher's callers
// push, the instance's engine loop takes.
type Local struct {
	mu     sync.Mutex
	batch  int
	newest bool // best-effort requests leave newest first
	q      [numClasses]fifo
}

// NewLocal returns empty queues for an instance whose batches hold at
// most batch requests: the profiled cap B^P or B^D of the tier and TP
// degree it serves (Instance.Batch), or the engine's own limit for a
// spare instance.
func NewLocal(batch int) (*Local, error) {
	if batch < 1 {
		return nil, fmt.Errorf("nitsum: local scheduler: batch cap must be at least 1, got %d", batch)
	}
	return &Local{batch: batch}, nil
}

// Push queues r under class c.
func (l *Local) Push(r Request, c Class) error {
	if c >= numClasses {
		return fmt.Errorf("nitsum: local scheduler: push %s: unknown class %d", r.ID, c)
	}
	l.mu.Lock()
	l.q[c].push(r)
	l.mu.Unlock()
	return nil
}

// BestEffortNewestFirst makes best-effort requests leave their queue
// newest first. The paper fills the slots feasible requests leave with
// best-effort ones without saying in which order (§3.3.2, L4); first come,
// first served (the default) gives them to the requests that have waited
// longest, which under overload have already missed their TTFT and can
// add throughput but not goodput. Newest first gives them to the ones
// that can still make it: the goodput-aware batch composition the
// ablation credits Nitsum's scheduler with (§4.2.1). Feasible and
// background requests stay first come, first served.
func (l *Local) BestEffortNewestFirst() {
	l.mu.Lock()
	l.newest = true
	l.mu.Unlock()
}

// NextBatch removes the requests of the next iteration from the queues
// and appends them to dst: feasible requests first, then best-effort,
// then background, each in arrival order (best effort newest first after
// BestEffortNewestFirst), at most min(room, batch cap) in all. room is what the engine can still add this iteration (the cap
// minus requests already running, say); a room of 0 or less takes
// nothing.
func (l *Local) NextBatch(dst []Request, room int) []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := min(room, l.batch)
	for c := range l.q {
		for n > 0 && l.q[c].len() > 0 {
			if l.newest && Class(c) == BestEffort {
				dst = append(dst, l.q[c].popNewest())
			} else {
				dst = append(dst, l.q[c].pop())
			}
			n--
		}
	}
	return dst
}

// Len is the number of requests queued under class c.
func (l *Local) Len(c Class) int {
	if c >= numClasses {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.q[c].len()
}

// Batch is the batch cap.
func (l *Local) Batch() int { return l.batch }

// fifo is a first-in, first-out queue over a slice that reuses its
// space: popped slots are reclaimed when half the slice is dead.
type fifo struct {
	buf  []Request
	head int
}

func (f *fifo) len() int { return len(f.buf) - f.head }

func (f *fifo) push(r Request) {
	if f.head > 0 && f.head >= len(f.buf)/2 && len(f.buf) == cap(f.buf) {
		n := copy(f.buf, f.buf[f.head:])
		clear(f.buf[n:])
		f.buf, f.head = f.buf[:n], 0
	}
	f.buf = append(f.buf, r)
}

// popNewest removes the last request pushed.
func (f *fifo) popNewest() Request {
	last := len(f.buf) - 1
	r := f.buf[last]
	f.buf[last] = Request{}
	f.buf = f.buf[:last]
	if f.head == len(f.buf) {
		f.buf, f.head = f.buf[:0], 0
	}
	return r
}

func (f *fifo) pop() Request {
	r := f.buf[f.head]
	f.buf[f.head] = Request{}
	f.head++
	if f.head == len(f.buf) {
		f.buf, f.head = f.buf[:0], 0
	}
	return r
}
