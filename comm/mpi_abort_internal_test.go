package comm

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// TestMPIWatcherMeetsAbort: a peer's abort notice that the watcher finds
// while this process's own Abort is telling the others ends both. The
// watcher used to handle the notice with m.mu held while Abort, holding
// abortOnce, waited for m.mu to send its notices: each waited for the
// other for good (TestMPIFailure/hang hung so under load). A fake
// library holds the watcher inside its poll of the standing receive
// until Abort is under way, then completes it with rank 2's notice.
func TestMPIWatcherMeetsAbort(t *testing.T) {
	notice := []byte("rank 2: all_reduce timed out")
	const standingReq = 1
	var (
		next     atomic.Uintptr // request ids after the standing receive's
		buf      atomic.Pointer[byte]
		armed    atomic.Bool
		inside   = make(chan struct{}) // the watcher is held in its poll
		released = make(chan struct{}) // let it go with the notice
	)
	next.Store(standingReq)
	ok := func() int32 { return mpiSuccess }
	lib := &mpiLib{
		irecv: func(p unsafe.Pointer, _ int32, _ uintptr, _, tag int32, _ uintptr, req *uintptr) int32 {
			if tag == mpiTagAbort {
				buf.Store((*byte)(p))
			}
			*req = next.Add(1) - 1
			return ok()
		},
		isend: func(_ unsafe.Pointer, _ int32, _ uintptr, _, _ int32, _ uintptr, req *uintptr) int32 {
			*req = next.Add(1) - 1
			return ok()
		},
		testall: func(_ int32, reqs *uintptr, flag *int32, st *mpiStatus) int32 {
			if *reqs != standingReq { // the notices Abort sends complete at once
				*flag = 1
				return ok()
			}
			if !armed.Load() {
				return ok()
			}
			if armed.CompareAndSwap(true, false) {
				close(inside)
				<-released
				copy(unsafe.Slice(buf.Load(), len(notice)), notice)
				st.source, *flag = 2, 1
			}
			return ok()
		},
		getCount:    func(_ *mpiStatus, _ uintptr, n *int32) int32 { *n = int32(len(notice)); return ok() },
		errorString: func(int32, *byte, *int32) int32 { return 1 },
		cancel:      func(*uintptr) int32 { return ok() },
		finalize:    func() int32 { return ok() },
	}
	m := &MPI{lib: lib, size: 3, timeout: time.Second, quit: make(chan struct{}), stopped: make(chan struct{}),
		abortCh: make(chan struct{}), abortMsg: make([]byte, mpiAbortLen)}
	standing := &mpiOp{recvs: []mpiMsg{{peer: mpiAnySource, tag: mpiTagAbort, b: m.abortMsg, any: true}}, standing: true}
	m.start(standing)
	m.background = append(m.background, standing)
	go m.watch()

	armed.Store(true)
	<-inside // the watcher holds m.mu, polling the standing receive
	aborted := make(chan struct{})
	go func() {
		m.Abort(errors.New("all_reduce timed out here"))
		close(aborted)
	}()
	<-m.Done()      // Abort holds abortOnce and is about to take m.mu
	close(released) // the peer's notice arrives now
	select {
	case <-aborted:
	case <-time.After(5 * time.Second):
		t.Fatal("Abort and the watcher deadlocked")
	}
	closed := make(chan struct{})
	go func() {
		m.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not stop")
	}
	for _, op := range m.background { // left to a process that exits after an abort
		op.pin.Unpin()
	}
	if err := m.Err(); err == nil || err.Error() != "all_reduce timed out here" {
		t.Fatalf("cause %v, want this process's own (it aborted first)", err)
	}
}
