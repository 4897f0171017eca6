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
// Thread level: MPI_THREAD_SERIALIZED. A rank's collectives may come from
// several goroutines at once (Comm.Start overlaps a transfer with compute,
// and every group has its own Comm), so one mutex serialises every MPI
// call. An operation is a set of nonblocking point-to-point requests
// (MPI_Isend/MPI_Irecv on MPI_COMM_WORLD) that the calling goroutine posts
// and then polls with MPI_Testall, taking the mutex for each call and
// yielding the CPU between polls; so a cancelled context, an abort or the
// per-operation timeout ends the wait at once, and no MPI call ever
// blocks. (Funnelling every call through one OS-locked goroutine,
// MPI_THREAD_FUNNELED, was the first design: each operation then cost two
// thread hand-offs, and a one-float all-reduce on 2 processes took
// 134-206 µs against 20-30 µs.)
//
// A watcher goroutine polls, every millisecond, the requests nobody waits
// for: the standing abort receive below, abort notices being sent, and
// operations abandoned on a timeout. Nothing can cancel a posted MPI
// request safely, so after an abandoned operation the transport is dead
// (see MPI.Abort): its buffers stay referenced by the watcher and the
// process is expected to exit.
//
// Collectives are built from point-to-point messages instead of MPI's own
// collectives, for three reasons: groups are created lazily by their
// members alone (MPI_Comm_split and MPI_Comm_create would need every
// process, in the same order); reductions must add in member order so that
// every member, and the in-process transport, get bit-identical sums
// (MPI_Allreduce's order is the library's choice); and a request is
// polled, so no MPI call ever blocks. A group's messages carry a tag
// hashed from its label and members: MPI delivers the messages of one
// (source, tag) in order, which orders the successive operations of a
// group. All-reduce is a reduce-scatter (chunk j to member
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

// MPI is this process's membership of an MPI job: its rank, the lock
// every MPI call takes, the watcher goroutine, and the factory of Worlds
// over the job's processes. There is one per process (OpenMPI returns it
// again). Its methods are safe for concurrent use.
type MPI struct {
	lib     *mpiLib
	rank    int
	size    int
	timeout time.Duration

	mu         sync.Mutex // held by every MPI call (MPI_THREAD_SERIALIZED)
	background []*mpiOp   // guarded by mu: requests the watcher polls
	closed     bool       // guarded by mu: MPI is finalised or being so

	quit    chan struct{} // closed by Close
	stopped chan struct{} // closed when the watcher returns
	closing sync.Once

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
// MPI_THREAD_SERIALIZED, errors returned rather than fatal) and starts the
// watcher goroutine, once per process; later calls return the same *MPI
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
		lib: lib, timeout: opts.Timeout, quit: make(chan struct{}), stopped: make(chan struct{}),
		abortCh: make(chan struct{}), abortMsg: make([]byte, mpiAbortLen),
	}
	if err := m.init(); err != nil {
		return nil, err
	}
	go m.watch()
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
		op := &mpiOp{}
		for p := range m.size {
			if p != m.rank {
				op.sends = append(op.sends, mpiMsg{peer: p, tag: mpiTagAbort, b: msg})
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.closed {
			m.start(op)
			m.background = append(m.background, op) // fire and forget: the watcher keeps it going
		}
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
	op := &mpiOp{sends: []mpiMsg{{peer: to, tag: int32(tag), b: b}}}
	return m.wait(ctx, op, 0, nil)
}

// RecvBytes receives into b a message of at most len(b) bytes from
// process from on a control tag and returns its length. As SendBytes, it
// is not counted and bounded by ctx only.
func (m *MPI) RecvBytes(ctx context.Context, b []byte, from, tag int) (int, error) {
	if err := m.checkControl(from, tag); err != nil {
		return 0, err
	}
	op := &mpiOp{recvs: []mpiMsg{{peer: from, tag: int32(tag), b: b, any: true}}}
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

// Close stops the watcher and finalises MPI (MPI_Finalize, which waits
// for every process to finalise). Call it once, after the last operation,
// on a healthy transport; after an abort, Close only stops the watcher,
// and the process should exit non-zero (mpirun then ends the job). MPI
// cannot be initialised again in this process.
func (m *MPI) Close() error {
	m.closing.Do(func() { close(m.quit) })
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

// mpiOp is a set of requests posted together and polled together; err
// is set when they have completed (or posting failed).
type mpiOp struct {
	sends, recvs []mpiMsg
	reqs         []uintptr
	statuses     []mpiStatus
	got          []int // elements (or bytes) received, by receive
	pin          runtime.Pinner
	err          error
	standing     bool // the abort receive
	zombie       bool // abandoned, or posting failed: only its posted requests are polled, by the watcher
}

// wait posts op and polls it until it completes, ctx ends, the transport
// aborts or, when timeout is positive, timeout passes; what names the
// operation in the timeout's error. An operation given up on is left to
// the watcher.
func (m *MPI) wait(ctx context.Context, op *mpiOp, timeout time.Duration, what func() string) error {
	select {
	case <-m.abortCh:
		return m.abortErr()
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errors.New("comm: MPI transport closed")
	}
	m.start(op)
	if op.zombie {
		m.background = append(m.background, op)
		m.mu.Unlock()
		return op.err
	}
	m.mu.Unlock()
	start := time.Now()
	idleSince := start
	for {
		m.mu.Lock()
		if m.closed { // finalised under us: no MPI call may follow
			m.mu.Unlock()
			return errors.New("comm: MPI transport closed during an operation")
		}
		done := m.test(op)
		m.mu.Unlock()
		if done {
			op.pin.Unpin()
			return op.err
		}
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-m.abortCh:
			err = m.abortErr()
		default:
			if timeout > 0 && time.Since(start) > timeout {
				err = fmt.Errorf("%w: %s at rank %d not done within %v (a peer died or hangs)", ErrTimeout, what(), m.rank, timeout)
			}
		}
		if err != nil {
			m.abandon(op)
			return err
		}
		backoff(time.Since(idleSince))
	}
}

// abandon leaves op's requests to the watcher.
func (m *MPI) abandon(op *mpiOp) {
	m.mu.Lock()
	op.zombie = true
	m.background = append(m.background, op)
	m.mu.Unlock()
}

// abortErr is what an operation returns once the transport has aborted.
func (m *MPI) abortErr() error {
	return fmt.Errorf("MPI transport aborted: %w", m.Err())
}

// init initialises MPI and posts the standing abort receive.
func (m *MPI) init() error {
	runtime.LockOSThread() // MPI_Init_thread's thread is the main thread of MPI's thread levels
	defer runtime.UnlockOSThread()
	l := m.lib
	var flag, provided int32
	if err := l.check("MPI_Initialized", l.initialized(&flag)); err != nil {
		return err
	}
	if flag != 0 {
		return errors.New("comm: MPI was initialised outside the transport")
	}
	if err := l.check("MPI_Init_thread", l.initThread(nil, nil, mpiThreadSerialized, &provided)); err != nil {
		return err
	}
	if provided < mpiThreadSerialized {
		return fmt.Errorf("comm: MPI provides thread level %d, need MPI_THREAD_SERIALIZED", provided)
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
		return err
	}
	m.rank, m.size = int(rank), int(size)
	if m.size > 1 {
		standing := &mpiOp{recvs: []mpiMsg{{peer: mpiAnySource, tag: mpiTagAbort, b: m.abortMsg, any: true}}, standing: true}
		m.start(standing)
		m.background = append(m.background, standing)
	}
	return nil
}

// watch is the watcher goroutine: every millisecond it polls the requests
// nobody waits for, and aborts the transport when a peer's abort notice
// arrives; on Close it finalises MPI.
func (m *MPI) watch() {
	defer close(m.stopped)
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-m.quit:
			m.finish()
			return
		case <-t.C:
		}
		m.mu.Lock()
		var peerAbort error
		kept := m.background[:0]
		for _, op := range m.background {
			if !m.test(op) {
				kept = append(kept, op)
				continue
			}
			op.pin.Unpin()
			if op.standing {
				src := op.statuses[0].source
				peerAbort = fmt.Errorf("comm: MPI rank %d aborted: %s", src, op.b(0))
			}
		}
		clear(m.background[len(kept):])
		m.background = kept
		m.mu.Unlock()
		// Outside m.mu: a local Abort running at the same moment holds
		// abortOnce while it takes m.mu to tell the others, so taking
		// them in the other order here deadlocked both (seen under load
		// in TestMPIFailure/hang: two ranks timing out at once, one's
		// notice arriving as the other aborted).
		if peerAbort != nil {
			m.abortLocal(peerAbort, false)
		}
	}
}

// spinFor is how long a waiting goroutine polls its pending requests back
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

// start posts op's requests (receives first); m.mu is held.
func (m *MPI) start(op *mpiOp) {
	l := m.lib
	n := len(op.recvs) + len(op.sends)
	op.reqs = make([]uintptr, n)
	op.statuses = make([]mpiStatus, n)
	op.got = make([]int, len(op.recvs))
	posted := 0
	fail := func(err error) {
		// The requests already posted stay posted: op becomes a zombie,
		// holding their buffers, and its caller sees err now.
		op.err = err
		op.zombie = true
		op.reqs, op.statuses = op.reqs[:posted], op.statuses[:posted]
	}
	// post posts message g as request req with MPI_Irecv or MPI_Isend.
	post := func(name string, call func(unsafe.Pointer, int32, uintptr, int32, int32, uintptr, *uintptr) int32, g *mpiMsg, req *uintptr) bool {
		p, cnt := g.ptr()
		if p != nil {
			op.pin.Pin(p)
		}
		dt := l.float
		if g.b != nil {
			dt = l.byte
		}
		if err := l.check(name, call(p, int32(cnt), dt, int32(g.peer), g.tag, l.commWorld, req)); err != nil {
			fail(err)
			return false
		}
		posted++
		return true
	}
	for i := range op.recvs {
		if !post("MPI_Irecv", l.irecv, &op.recvs[i], &op.reqs[i]) {
			return
		}
	}
	for i := range op.sends {
		if !post("MPI_Isend", l.isend, &op.sends[i], &op.reqs[len(op.recvs)+i]) {
			return
		}
	}
}

// test polls op's requests and reports whether all have completed; then it
// sets op.err from their statuses and op.got from the receives' counts.
// m.mu is held.
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

// finish finalises MPI on Close: on a healthy transport it cancels the
// standing abort receive and calls MPI_Finalize; after an abort it leaves
// the pending requests as they are (the process exits without finalising).
func (m *MPI) finish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.Err() != nil {
		return
	}
	l := m.lib
	for _, op := range m.background {
		if op.standing {
			l.cancel(&op.reqs[0])
			for !m.test(op) {
				runtime.Gosched()
			}
		}
	}
	l.finalize()
}
