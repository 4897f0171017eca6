package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrAborted is wrapped by every error a Comm operation returns: the World
// has been aborted (see World.Abort).
var ErrAborted = errors.New("comm: world aborted")

// ErrInvalid is wrapped by the abort cause when a call's arguments are
// inconsistent, for the caller alone (wrong buffer length, bad counts or
// member index) or across the members of a group (different operations,
// lengths, counts or roots).
var ErrInvalid = errors.New("comm: invalid arguments")

// Options configures a World. A zero field selects its default.
type Options struct {
	// Size is the number of ranks, at least 1.
	Size int
	// ElemBytes is the size of one element on the wire in bytes, used only
	// for byte accounting: 4 (the default) for float32; a transport that
	// moves BF16 sets 2.
	ElemBytes int
	// Transport moves the data; nil selects the in-process shared-memory
	// transport, with every rank a goroutine of this process.
	Transport Transport
}

// World is one set of ranks, numbered 0..Size()-1, that communicate through
// one Transport, together with the groups created over them and their byte
// counters. All methods are safe for concurrent use.
//
// A World is single-use with respect to failure: after Abort (called
// explicitly, or implicitly by any failed operation) every operation on
// every Comm of the World fails, and there is no reset. Build a new World
// (cheap: no goroutines, one small allocation per group member) and create
// the groups again from it.
type World struct {
	size      int
	elemBytes int
	transport Transport
	all       *Group

	mu     sync.Mutex // guards groups, order and key
	groups map[string]*Group
	order  []*Group // creation order, for Stats and Reset
	key    []byte   // scratch for the cache key

	dead    atomic.Bool // set once cause is
	abortMu sync.Mutex
	cause   error
	done    chan struct{}
}

// NewWorld returns a World of size ranks on the in-process transport,
// counting 4 bytes per element.
func NewWorld(size int) (*World, error) { return New(Options{Size: size}) }

// New returns a World configured by opts.
func New(opts Options) (*World, error) {
	if opts.Size < 1 {
		return nil, fmt.Errorf("comm: world size %d, want at least 1", opts.Size)
	}
	if opts.ElemBytes == 0 {
		opts.ElemBytes = 4
	}
	if opts.ElemBytes < 0 {
		return nil, fmt.Errorf("comm: element size %d bytes, want positive", opts.ElemBytes)
	}
	if opts.Transport == nil {
		opts.Transport = newLocal()
	}
	w := &World{
		size:      opts.Size,
		elemBytes: opts.ElemBytes,
		transport: opts.Transport,
		groups:    make(map[string]*Group),
		done:      make(chan struct{}),
	}
	ranks := make([]int, opts.Size)
	for i := range ranks {
		ranks[i] = i
	}
	all, err := w.Group("world", ranks...)
	if err != nil {
		return nil, err
	}
	w.all = all
	return w, nil
}

// Size returns the number of ranks.
func (w *World) Size() int { return w.size }

// ElemBytes returns the wire size of one element used for accounting.
func (w *World) ElemBytes() int { return w.elemBytes }

// Comm returns rank's handle on the group of all ranks in rank order,
// labelled "world", or nil when rank is out of range.
func (w *World) Comm(rank int) *Comm { return w.all.Comm(rank) }

// Group returns the group of the given world ranks, in member order: the
// member index of ranks[i] is i, so any order of ranks is allowed (the
// Shift Parallelism "full TP" group over s·t ranks is ordered tp-major,
// sp-minor, e.g. 0,2,4,1,3,5). The label names the group's role ("tp",
// "sp", ...) in Stats.
//
// Groups are cached by (label, ranks): calling Group again with the same
// label and the same ranks in the same order returns the same *Group, with
// a map lookup and no allocation, so plans may rebuild their groups every
// step. Two groups with the same ranks but different labels are
// independent. The World keeps every group it has created until it is
// dropped.
func (w *World) Group(label string, ranks ...int) (*Group, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.groupLocked(label, ranks)
}

// Split returns the groups labelled label over each of parts (as Group
// does for each part), as one handle per world rank: the result has
// length Size(), with the handle of rank r in its group at index r and nil
// for ranks in no part. The parts must be disjoint. For Shift Parallelism
// with (SP=s, TP=t): TP groups are the runs of t consecutive ranks, SP
// groups the strides of t.
func (w *World) Split(label string, parts ...[]int) ([]*Comm, error) {
	seen := make([]bool, w.size)
	for _, part := range parts {
		for _, r := range part {
			if r < 0 || r >= w.size {
				return nil, fmt.Errorf("comm: group %q: rank %d outside world of %d", label, r, w.size)
			}
			if seen[r] {
				return nil, fmt.Errorf("comm: split %q: rank %d is in two parts", label, r)
			}
			seen[r] = true
		}
	}
	comms := make([]*Comm, w.size)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, part := range parts {
		g, err := w.groupLocked(label, part)
		if err != nil {
			return nil, err
		}
		for i, r := range g.ranks {
			comms[r] = g.comms[i]
		}
	}
	return comms, nil
}

func (w *World) groupLocked(label string, ranks []int) (*Group, error) {
	w.key = binary.AppendUvarint(w.key[:0], uint64(len(label)))
	w.key = append(w.key, label...)
	for _, r := range ranks {
		w.key = binary.AppendVarint(w.key, int64(r))
	}
	if g := w.groups[string(w.key)]; g != nil {
		return g, nil
	}
	if len(ranks) == 0 {
		return nil, fmt.Errorf("comm: group %q has no ranks", label)
	}
	member := make([]int, w.size) // world rank → member index + 1
	for i, r := range ranks {
		if r < 0 || r >= w.size {
			return nil, fmt.Errorf("comm: group %q: rank %d outside world of %d", label, r, w.size)
		}
		if member[r] != 0 {
			return nil, fmt.Errorf("comm: group %q: rank %d listed twice", label, r)
		}
		member[r] = i + 1
	}
	g := &Group{label: label, ranks: append([]int(nil), ranks...), member: member}
	var eps []Endpoint
	var err error
	if nt, ok := w.transport.(namedTransport); ok {
		eps, err = nt.NewNamedGroup(label, g.ranks)
	} else {
		eps, err = w.transport.NewGroup(g.ranks)
	}
	if err != nil {
		return nil, fmt.Errorf("comm: group %q: %w", label, err)
	}
	if len(eps) != len(ranks) {
		return nil, fmt.Errorf("comm: group %q: transport returned %d endpoints for %d members", label, len(eps), len(ranks))
	}
	g.comms = make([]*Comm, len(ranks))
	for i, ep := range eps {
		if ep == nil {
			continue
		}
		c := &Comm{w: w, g: g, ep: ep, rank: i, eq: make([]int, len(ranks))}
		g.comms[i] = c
	}
	w.groups[string(w.key)] = g
	w.order = append(w.order, g)
	return g, nil
}

// Abort poisons the World: every operation blocked in, or later entering,
// any group of this World returns an error that wraps ErrAborted and err
// (ErrAborted alone when err is nil). The first call wins; later calls do
// nothing. A failing rank calls Abort so that its peers stop waiting for
// it. Operations that every member of a group had already entered when
// Abort was called may still complete successfully.
func (w *World) Abort(err error) {
	if err == nil {
		err = ErrAborted
	}
	w.abortMu.Lock()
	if w.cause != nil {
		w.abortMu.Unlock()
		return
	}
	w.cause = err
	w.dead.Store(true)
	close(w.done)
	w.abortMu.Unlock()
	w.transport.Abort()
}

// Err returns the cause of the abort, or nil while the World is healthy.
func (w *World) Err() error {
	w.abortMu.Lock()
	defer w.abortMu.Unlock()
	return w.cause
}

// Done returns a channel closed when the World is aborted.
func (w *World) Done() <-chan struct{} { return w.done }

// Stats returns a snapshot of the bytes and calls counted so far, one row
// per group label, world rank and kind. Operations running concurrently
// with Stats may or may not be included.
func (w *World) Stats() Stats {
	w.mu.Lock()
	groups := w.order[:len(w.order):len(w.order)]
	w.mu.Unlock()
	s := make(Stats)
	for _, g := range groups {
		for _, c := range g.comms {
			if c == nil {
				continue
			}
			for k := range c.traffic {
				n := &c.traffic[k]
				calls := n.calls.Load()
				if calls == 0 {
					continue
				}
				key := Key{Group: g.label, Rank: g.ranks[c.rank], Kind: Kind(k)}
				s[key] = s[key].Add(Counter{calls, n.sent.Load(), n.recv.Load()})
			}
		}
	}
	return s
}

// ResetStats zeroes every counter. Operations running concurrently with
// ResetStats may be counted partly before and partly after it; to measure
// one interval without a reset, subtract two snapshots with Stats.Sub.
func (w *World) ResetStats() {
	w.mu.Lock()
	groups := w.order[:len(w.order):len(w.order)]
	w.mu.Unlock()
	for _, g := range groups {
		for _, c := range g.comms {
			if c == nil {
				continue
			}
			for k := range c.traffic {
				n := &c.traffic[k]
				n.calls.Store(0)
				n.sent.Store(0)
				n.recv.Store(0)
			}
		}
	}
}

// Group is an ordered set of world ranks that run collectives together. It
// is immutable and safe for concurrent use.
type Group struct {
	label  string
	ranks  []int   // member index → world rank
	member []int   // world rank → member index + 1, 0 for non-members
	comms  []*Comm // member index → handle (nil where not hosted here)
}

// Label returns the label the group was created with.
func (g *Group) Label() string { return g.label }

// Size returns the number of members.
func (g *Group) Size() int { return len(g.ranks) }

// Ranks returns the world ranks of the members, in member order.
func (g *Group) Ranks() []int { return append([]int(nil), g.ranks...) }

// WorldRank returns the world rank of the given member, which must be in
// [0, Size()).
func (g *Group) WorldRank(member int) int { return g.ranks[member] }

// Member returns the member index of a world rank and whether it is a
// member at all.
func (g *Group) Member(worldRank int) (int, bool) {
	if worldRank < 0 || worldRank >= len(g.member) || g.member[worldRank] == 0 {
		return 0, false
	}
	return g.member[worldRank] - 1, true
}

// Comm returns the handle of a world rank in this group, or nil when the
// rank is not a member (or is hosted by another process).
func (g *Group) Comm(worldRank int) *Comm {
	m, ok := g.Member(worldRank)
	if !ok {
		return nil
	}
	return g.comms[m]
}
