package comm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// The MPI transport: the ranks of a World are the processes of one MPI
// job (world rank r is MPI rank r of MPI_COMM_WORLD, one rank per process),
// launched by mpirun. Open MPI is loaded at run time (mpi_lib.go).
//
// Thread level: MPI_THREAD_FUNNELED. A rank's collectives may come from
// several goroutines at once (Comm.Start overlaps a transfer with compute,
// and every group has its own Comm), so every MPI call is funnelled through
// one goroutine locked to the OS thread that initialised MPI, the progress
// goroutine. An operation is a set of nonblocking point-to-point requests
// (MPI_Isend/MPI_Irecv on MPI_COMM_WORLD) that the progress goroutine posts
// and polls with MPI_Testall; the caller waits for them on a channel, so a
// cancelled context, an abort or the per-operation timeout ends the wait
// at once. Nothing can cancel a posted MPI request safely, so after any of
// those the transport is dead (see MPI.Abort): the requests' buffers stay
// referenced by the progress goroutine and the process is expected to
// exit.
//
// Collectives are built from point-to-point messages instead of MPI's own
// collectives, for three reasons: groups are created lazily by their
// members alone (MPI_Comm_split and MPI_Comm_create would need every
// process, in the same order); reductions must add in member order so that
// every member, and the in-process transport, get bit-identical sums
// (MPI_Allreduce's order is the library's choice); and a request is
// polled, so no MPI call ever blocks the progress goroutine. A group's
// messages carry a tag hashed from its label and members: MPI delivers the
// messages of one (source, tag) in order, which orders the successive
// operations of a group. All-reduce is a reduce-scatter (chunk j to member
// j, summed there in member order) followed by an all-gather of the summed
// chunks, the data movement of the ring algorithm whose bytes volume.go
// counts; all-gather, all-to-all and broadcast send each member's part
// straight to its destination.
//
// One failed rank wakes every process: a process whose World aborts sends
// the cause to every other process on a reserved tag, on which each keeps
// a receive posted; its arrival aborts the receiver's transport. A rank
// that dies or hangs sends nothing, and its peers' operations fail when the
// per-operation timeout (MPIOptions.Timeout) passes.

// DefaultMPITimeout is the default bound on one MPI operation: a peer that
// has not done its part within it is taken as dead or hung.
const DefaultMPITimeout = 10 * time.Second

// ErrTimeout is wrapped by the error of an MPI operation that did not
// complete within the transport's timeout.
var ErrTimeout = errors.New("comm: MPI operation timed out")

// Tags: the control tags of MPI.SendBytes and MPI.RecvBytes are below
// mpiTagGroups; group tags are mpiTagGroups plus a 20-bit hash.
const (
	mpiTagAbort  = 1
	mpiTagGroups = 1 << 10
	mpiTagBits   = 20
	// MaxControlTag bounds the tags MPI.SendBytes and MPI.RecvBytes take.
	MaxControlTag = mpiTagGroups - 1
	// mpiAbortLen is the longest abort cause sent to peers, in bytes.
	mpiAbortLen = 512
)

// MPIOptions configure the MPI transport.
type MPIOptions struct {
	// Timeout bounds every operation of every group (waiting for peers
	// included); 0 means DefaultMPITimeout.
	Timeout time.Duration
}

// MPI is this process's membership of an MPI job: its rank, the progress
// goroutine that makes every MPI call, and the factory of Worlds over the
// job's processes. There is one per process (OpenMPI returns it again).
// Its methods are safe for concurrent use.
type MPI struct {
	lib     *mpiLib
	rank    int
	size    int
	timeout time.Duration

	submit  chan *mpiOp
	quit    chan struct{} // closed by Close
	stopped chan struct{} // closed when the progress goroutine returns
	closeMu sync.Mutex
	closed  bool

	abortCh   chan struct{}
	abortOnce sync.Once
	causeMu   sync.Mutex
	cause     error
	abortMsg  []byte // the standing receive's buffer
}

var mpiProc struct {
	sync.Mutex
	m   *MPI
	err error
}

// OpenMPI loads Open MPI, initialises it (MPI_Init_thread with
// MPI_THREAD_FUNNELED, errors returned rather than fatal) and starts the
// progress goroutine, once per process; later calls return the same *MPI
// (their options are ignored) or the same error. It fails with an error
// wrapping ErrNoMPI when the library is missing.
func OpenMPI(opts MPIOptions) (*MPI, error) {
	mpiProc.Lock()
	defer mpiProc.Unlock()
	if mpiProc.m != nil || mpiProc.err != nil {
		return mpiProc.m, mpiProc.err
	}
	m, err := openMPI(opts)
	mpiProc.m, mpiProc.err = m, err
	return m, err
}

func openMPI(opts MPIOptions) (*MPI, error) {
	lib, err := loadMPI()
	if err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultMPITimeout
	}
	m := &MPI{
		lib: lib, timeout: opts.Timeout,
		submit: make(chan *mpiOp, 64), quit: make(chan struct{}), stopped: make(chan struct{}),
		abortCh: make(chan struct{}), abortMsg: make([]byte, mpiAbortLen),
	}
	ready := make(chan error, 1)
	go m.progress(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return m, nil
}

// Rank is this process's rank in the job (MPI_COMM_WORLD).
func (m *MPI) Rank() int { return m.rank }

// Size is the number of processes in the job.
func (m *MPI) Size() int { return m.size }

// Timeout is the bound on one operation.
func (m *MPI) Timeout() time.Duration { return m.timeout }

// Library is the path the Open MPI library was loaded from.
func (m *MPI) Library() string { return m.lib.path }

// Err returns the cause of the abort, or nil while the transport is
// healthy.
func (m *MPI) Err() error {
	m.causeMu.Lock()
	defer m.causeMu.Unlock()
	return m.cause
}

// Done is closed when the transport aborts.
func (m *MPI) Done() <-chan struct{} { return m.abortCh }

// Abort kills the transport for good: every operation waiting now or
// started later, in every World over it, fails; the cause is sent to every
// other process, whose transports abort too. The first call wins.
func (m *MPI) Abort(cause error) {
	if cause == nil {
		cause = ErrAborted
	}
	m.abortLocal(cause, true)
}

func (m *MPI) abortLocal(cause error, tell bool) {
	m.abortOnce.Do(func() {
		m.causeMu.Lock()
		m.cause = cause
		m.causeMu.Unlock()
		close(m.abortCh)
		if !tell {
			return
		}
		msg := fmt.Appendf(nil, "rank %d: %v", m.rank, cause)
		if len(msg) > mpiAbortLen {
			msg = msg[:mpiAbortLen]
		}
		op := &mpiOp{done: make(chan struct{})}
		for p := range m.size {
			if p != m.rank {
				op.sends = append(op.sends, mpiMsg{peer: p, tag: mpiTagAbort, b: msg})
			}
		}
		m.post(op) // fire and forget: the progress goroutine keeps it going
	})
}

// NewWorld returns a World over the job's processes on this transport,
// counting elemBytes per element (0: 4). This process hosts world rank
// Rank() only: Group.Comm returns nil for the others. It fails once the
// transport has aborted.
func (m *MPI) NewWorld(elemBytes int) (*World, error) {
	if err := m.Err(); err != nil {
		return nil, fmt.Errorf("comm: MPI transport aborted: %w", err)
	}
	t := &mpiTransport{m: m, tags: map[int32]string{}}
	w, err := New(Options{Size: m.size, ElemBytes: elemBytes, Transport: t})
	if err != nil {
		return nil, err
	}
	t.world = w
	return w, nil
}

// SendBytes sends b to process to on a control tag in [0, MaxControlTag]
// (tag 1 is reserved), outside every World: these bytes are not counted.
// It waits until the send completes, ctx ends or the transport aborts; no
// timeout is applied beyond ctx's.
func (m *MPI) SendBytes(ctx context.Context, b []byte, to, tag int) error {
	if err := m.checkControl(to, tag); err != nil {
		return err
	}
	op := &mpiOp{sends: []mpiMsg{{peer: to, tag: int32(tag), b: b}}, done: make(chan struct{})}
	return m.wait(ctx, op, 0, nil)
}

// RecvBytes receives into b a message of at most len(b) bytes from
// process from on a control tag and returns its length. As SendBytes, it
// is not counted and bounded by ctx only.
func (m *MPI) RecvBytes(ctx context.Context, b []byte, from, tag int) (int, error) {
	if err := m.checkControl(from, tag); err != nil {
		return 0, err
	}
	op := &mpiOp{recvs: []mpiMsg{{peer: from, tag: int32(tag), b: b, any: true}}, done: make(chan struct{})}
	if err := m.wait(ctx, op, 0, nil); err != nil {
		return 0, err
	}
	return op.got[0], nil
}

func (m *MPI) checkControl(peer, tag int) error {
	if peer < 0 || peer >= m.size || peer == m.rank {
		return fmt.Errorf("%w: control peer %d in a job of %d at rank %d", ErrInvalid, peer, m.size, m.rank)
	}
	if tag < 0 || tag > MaxControlTag || tag == mpiTagAbort {
		return fmt.Errorf("%w: control tag %d (want 0 or 2..%d)", ErrInvalid, tag, MaxControlTag)
	}
	return nil
}

// Close stops the progress goroutine and finalises MPI (MPI_Finalize,
// which waits for every process to finalise). Call it once, after the last
// operation, on a healthy transport; after an abort, Close only stops the
// progress goroutine, and the process should exit non-zero (mpirun then
// ends the job). MPI cannot
// be initialised again in this process.
func (m *MPI) Close() error {
	m.closeMu.Lock()
	if m.closed {
		m.closeMu.Unlock()
		return nil
	}
	m.closed = true
	close(m.quit)
	m.closeMu.Unlock()
	<-m.stopped
	return nil
}

// mpiMsg is one point-to-point message of an operation: float32 elements
// (f) or bytes (b).
type mpiMsg struct {
	peer int
	tag  int32
	f    []float32
	b    []byte
	any  bool // a receive that may be shorter than its buffer (control)
}

func (g *mpiMsg) ptr() (unsafe.Pointer, int) {
	if g.b != nil {
		if len(g.b) == 0 {
			return nil, 0
		}
		return unsafe.Pointer(&g.b[0]), len(g.b)
	}
	if len(g.f) == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&g.f[0]), len(g.f)
}

// mpiOp is a set of requests posted together; done is closed when all have
// completed or posting failed, with err set.
type mpiOp struct {
	sends, recvs []mpiMsg
	reqs         []uintptr
	statuses     []mpiStatus
	got          []int // elements (or bytes) received, by receive
	pin          runtime.Pinner
	err          error
	done         chan struct{}
	standing     bool // the abort receive
	zombie       bool // posting failed: done is closed, the posted requests still run
}

// post hands op to the progress goroutine; after Close it fails op.
func (m *MPI) post(op *mpiOp) {
	select {
	case m.submit <- op:
	case <-m.stopped:
		op.err = errors.New("comm: MPI transport closed")
		close(op.done)
	}
}

// wait posts op and waits for it, for at most timeout when positive; what
// names the operation in the timeout's error.
func (m *MPI) wait(ctx context.Context, op *mpiOp, timeout time.Duration, what func() string) error {
	select {
	case <-m.abortCh:
		return m.abortErr()
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.post(op)
	var expire <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
		return ctx.Err()
	case <-m.abortCh:
		select {
		case <-op.done: // finished meanwhile
			return op.err
		default:
		}
		return m.abortErr()
	case <-expire:
		return fmt.Errorf("%w: %s at rank %d not done within %v (a peer died or hangs)", ErrTimeout, what(), m.rank, timeout)
	}
}

// abortErr is what an operation returns once the transport has aborted.
func (m *MPI) abortErr() error {
	return fmt.Errorf("MPI transport aborted: %w", m.Err())
}

// progress is the progress goroutine: it initialises MPI on its locked OS
// thread, then posts submitted operations and polls them until Close.
func (m *MPI) progress(ready chan<- error) {
	runtime.LockOSThread() // every MPI call from this thread: MPI_THREAD_FUNNELED
	defer close(m.stopped)
	l := m.lib
	var flag, provided int32
	if err := l.check("MPI_Initialized", l.initialized(&flag)); err != nil {
		ready <- err
		return
	}
	if flag != 0 {
		ready <- errors.New("comm: MPI was initialised outside the transport")
		return
	}
	if err := l.check("MPI_Init_thread", l.initThread(nil, nil, mpiThreadFunneled, &provided)); err != nil {
		ready <- err
		return
	}
	if provided < mpiThreadFunneled {
		ready <- fmt.Errorf("comm: MPI provides thread level %d, need MPI_THREAD_FUNNELED", provided)
		return
	}
	var rank, size int32
	err := l.check("MPI_Comm_set_errhandler", l.setErrhandler(l.commWorld, l.errorsReturn))
	if err == nil {
		err = l.check("MPI_Comm_rank", l.commRank(l.commWorld, &rank))
	}
	if err == nil {
		err = l.check("MPI_Comm_size", l.commSize(l.commWorld, &size))
	}
	if err != nil {
		ready <- err
		return
	}
	m.rank, m.size = int(rank), int(size)

	var active []*mpiOp
	if m.size > 1 {
		standing := &mpiOp{recvs: []mpiMsg{{peer: mpiAnySource, tag: mpiTagAbort, b: m.abortMsg, any: true}}, done: make(chan struct{}), standing: true}
		m.start(standing)
		active = append(active, standing)
	}
	ready <- nil

	var idleSince time.Time // when the active operations last progressed
	idle := 0
	poll := time.NewTicker(time.Millisecond) // the standing abort receive, while nothing else runs
	defer poll.Stop()
	for {
		if len(active) == 0 || (len(active) == 1 && active[0].standing) {
			select {
			case op := <-m.submit:
				active = append(active, m.start(op)...)
				idle = 0
			case <-m.quit:
				m.finish(active)
				return
			case <-poll.C:
			}
		}
	drain:
		for {
			select {
			case op := <-m.submit:
				active = append(active, m.start(op)...)
			case <-m.quit:
				m.finish(active)
				return
			default:
				break drain
			}
		}
		progressed := false
		kept := active[:0]
		for _, op := range active {
			if !m.test(op) {
				kept = append(kept, op)
				continue
			}
			progressed = true
			if op.standing {
				src := op.statuses[0].source
				m.abortLocal(fmt.Errorf("comm: MPI rank %d aborted: %s", src, op.b(0)), false)
			}
			op.pin.Unpin()
			if !op.zombie {
				close(op.done)
			}
		}
		clear(active[len(kept):])
		active = kept
		if progressed {
			idle = 0
			continue
		}
		if idle == 0 {
			idleSince = time.Now()
		}
		idle++
		backoff(time.Since(idleSince))
	}
}

// spinFor is how long the progress goroutine polls pending requests back
// to back, yielding the CPU between polls (sched_yield, so a computing
// rank of another process on the same core runs first), before it starts
// sleeping between polls; a rank waiting that long is waiting on a slow
// peer, and sleeping leaves the cores, which it shares with the computing
// ranks, free. Go's sleeps are coarse (tens of µs and more), so the spin
// covers every collective whose peers are at it. Chosen on 2 cores: 2 ms.
const spinFor = 2 * time.Millisecond

// backoff yields the processor while requests are pending, idle for so
// long: sched_yield for spinFor, then sleeps of 100 µs.
func backoff(idle time.Duration) {
	if idle < spinFor {
		osYield()
		return
	}
	time.Sleep(100 * time.Microsecond)
}

// b returns the bytes received by receive i of a byte operation.
func (op *mpiOp) b(i int) string {
	return string(op.recvs[i].b[:op.got[i]])
}

// start posts op's requests (receives first) and returns op for the
// active list.
func (m *MPI) start(op *mpiOp) []*mpiOp {
	l := m.lib
	n := len(op.recvs) + len(op.sends)
	op.reqs = make([]uintptr, n)
	op.statuses = make([]mpiStatus, n)
	op.got = make([]int, len(op.recvs))
	posted := 0
	fail := func(err error) []*mpiOp {
		// The requests already posted stay posted: op stays active as a
		// zombie, holding their buffers, and its caller sees err now.
		op.err = err
		close(op.done)
		op.zombie = true
		op.reqs, op.statuses = op.reqs[:posted], op.statuses[:posted]
		return []*mpiOp{op}
	}
	for i := range op.recvs {
		g := &op.recvs[i]
		p, cnt := g.ptr()
		if p != nil {
			op.pin.Pin(p)
		}
		dt := l.float
		if g.b != nil {
			dt = l.byte
		}
		if err := l.check("MPI_Irecv", l.irecv(p, int32(cnt), dt, int32(g.peer), g.tag, l.commWorld, &op.reqs[i])); err != nil {
			return fail(err)
		}
		posted++
	}
	for i := range op.sends {
		g := &op.sends[i]
		p, cnt := g.ptr()
		if p != nil {
			op.pin.Pin(p)
		}
		dt := l.float
		if g.b != nil {
			dt = l.byte
		}
		if err := l.check("MPI_Isend", l.isend(p, int32(cnt), dt, int32(g.peer), g.tag, l.commWorld, &op.reqs[len(op.recvs)+i])); err != nil {
			return fail(err)
		}
		posted++
	}
	return []*mpiOp{op}
}

// test polls op's requests and reports whether all have completed; then it
// sets op.err from their statuses and op.got from the receives' counts.
func (m *MPI) test(op *mpiOp) bool {
	l := m.lib
	if len(op.reqs) == 0 {
		return true
	}
	var flag int32
	code := l.testall(int32(len(op.reqs)), &op.reqs[0], &flag, &op.statuses[0])
	if op.zombie {
		return flag != 0 || code != mpiSuccess
	}
	if code != mpiSuccess && code != mpiErrInStatus {
		if op.err == nil {
			op.err = l.check("MPI_Testall", code)
		}
		return true
	}
	if flag == 0 && code == mpiSuccess {
		return false
	}
	for i := range op.recvs {
		st := &op.statuses[i]
		if st.err != mpiSuccess && code == mpiErrInStatus {
			op.err = errors.Join(op.err, fmt.Errorf("receive from rank %d: %s", op.recvs[i].peer, l.errString(st.err)))
			continue
		}
		g := &op.recvs[i]
		dt := l.float
		if g.b != nil {
			dt = l.byte
		}
		var cnt int32
		if err := l.check("MPI_Get_count", l.getCount(st, dt, &cnt)); err != nil {
			op.err = errors.Join(op.err, err)
			continue
		}
		op.got[i] = int(cnt)
		if _, want := g.ptr(); !g.any && int(cnt) != want {
			op.err = errors.Join(op.err, fmt.Errorf("%w: rank %d sent %d elements, %d expected", ErrInvalid, st.source, cnt, want))
		}
	}
	if code == mpiErrInStatus {
		for i := range op.sends {
			if st := &op.statuses[len(op.recvs)+i]; st.err != mpiSuccess {
				op.err = errors.Join(op.err, fmt.Errorf("send to rank %d: %s", op.sends[i].peer, l.errString(st.err)))
			}
		}
	}
	return true
}

// finish ends the progress goroutine on Close: on a healthy transport it
// cancels the standing abort receive and finalises MPI.
func (m *MPI) finish(active []*mpiOp) {
	if m.Err() != nil {
		return // requests may be pending forever: the process exits without MPI_Finalize
	}
	l := m.lib
	for _, op := range active {
		if op.standing {
			l.cancel(&op.reqs[0])
			for !m.test(op) {
				runtime.Gosched()
			}
		}
	}
	l.finalize()
}
