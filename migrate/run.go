package migrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/kvcache"
	"github.com/gearboxlm/gearbox/parallel"
	"github.com/gearboxlm/gearbox/tensor"
)

// Group labels under which comm counts a migration's traffic.
const (
	DataGroup = "migrate"      // KV bytes: one two-member group per ordered (sender, receiver) pair
	MetaGroup = "migrate_meta" // the handshake, over every rank of the World
)

// DefaultStagingBytes is the size of each staging buffer when
// Options.StagingBytes is 0: small, as K8 asks, and the fastest of 16 KiB
// to 4 MiB in BenchmarkStaging on a 2-core EPYC (256 KiB and 1 MiB tie;
// two buffers of 256 KiB stay in a core's L2).
const DefaultStagingBytes = 256 << 10

// Mode is how KV crosses between ranks.
type Mode uint8

const (
	// Pipelined packs the scattered pages into two small staging buffers
	// per peer and sends them alternately: one is filled while the other
	// is in flight (spec K7, K8). The default.
	Pipelined Mode = iota
	// Unpipelined packs into one staging buffer per peer and sends it
	// before filling it again: Fig 7's "aggregated, not pipelined".
	Unpipelined
	// PerPage sends every page as its own message, with no staging: the
	// transfer's heads of one block of one layer, keys or values, which
	// are contiguous in both caches when the block sizes agree (else each
	// run contiguous on both sides). The cudaMemcpyAsync-per-page
	// baseline of Fig 7, kept for comparison.
	PerPage
	numModes
)

func (m Mode) String() string {
	switch m {
	case Pipelined:
		return "pipelined"
	case Unpipelined:
		return "unpipelined"
	case PerPage:
		return "per-page"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Options tune Run. Every rank of a migration passes the same Mode and
// StagingBytes; the handshake refuses otherwise.
type Options struct {
	Mode Mode
	// StagingBytes is the size of each staging buffer, a positive
	// multiple of 4 (float32 values); 0 means DefaultStagingBytes. A
	// pair's stream goes in messages of this size, the last shorter, and
	// a buffer never exceeds the pair's stream.
	StagingBytes int
	// Hooks, when not nil, watch and perturb the data phase (tests).
	Hooks *Hooks
}

// Hooks are called during the data phase with the rank, the peer and the
// staging buffer's index (0 or 1; always 0 under Unpipelined); PerPage
// calls none. They run on Run's goroutines, concurrently with each other
// and with other ranks'; nil hooks are skipped.
type Hooks struct {
	Fill func(rank, peer, buf int) // before packing into buffer buf
	Send func(rank, peer, buf int) // in the send's goroutine, before its Send
	Sent func(rank, peer, buf int) // in the send's goroutine, once its Send has completed
}

// Stats is what one rank's Run moved.
type Stats struct {
	SentBytes  int64 // KV bytes sent to other ranks
	RecvBytes  int64 // KV bytes received from other ranks
	LocalBytes int64 // KV bytes copied within the rank
	Messages   int   // KV messages sent
}

// Run is rank rp.Rank's part of a migration, called by every rank of the
// World at once (ranks [0, w.Size()), rp.Ranks of them), each with its
// own part of the same plan (Plan.Rank), its source cache src (holding
// heads rp.Held of its source group's requests, through the requests' Src
// tables) and its destination cache dst (heads rp.Holds, through the Dst
// tables). src may be nil on a rank that sends and keeps nothing, dst on
// one that receives and keeps nothing; src and dst may be one cache when
// the blocks written are disjoint from the blocks read.
//
// Stop-and-migrate (spec K6): the caller guarantees that no forward step
// reads or writes these caches, and no other migration uses w, until
// every rank's Run has returned.
//
// First the handshake: every rank publishes its transfers (request, KV
// heads, context length) and its local checks' verdict, and all verify
// that senders and receivers agree. On any disagreement, or a rank that
// cannot run its part (block tables that do not cover the context, block
// ids outside the cache, a cache of the wrong shape, destination blocks
// shared by two requests), every rank returns the same error wrapping
// ErrHandshake, with no cache byte and no block table changed and w still
// usable. Then the data: each rank sends to each peer, receives from each
// peer and copies what it keeps, concurrently. Afterwards dst holds, for
// every request of the rank's new group, exactly heads rp.Holds of tokens
// [0, Len) through the request's Dst table, bit for bit as the sources
// held them; the caller then frees the Src tables. A failure of comm in
// either phase (a cancelled ctx) aborts w, as comm failures do, and
// leaves the source caches intact and the Dst blocks partly written.
func Run(ctx context.Context, w *comm.World, rp RankPlan, src, dst *kvcache.Cache, opt Options) (Stats, error) {
	if w == nil || rp.Rank < 0 || rp.Rank >= w.Size() {
		return Stats{}, fmt.Errorf("migrate: rank %d is not a rank of the World", rp.Rank)
	}
	x := &run{w: w, rp: rp, src: src, dst: dst, opt: opt}
	me := header{
		rank: rp.Rank, layers: rp.Layers, headDim: rp.HeadDim, mode: opt.Mode,
		held: rp.Held, holds: rp.Holds, recs: records(&rp),
	}
	if src != nil {
		me.srcBS = src.BlockSize
	}
	if dst != nil {
		me.dstBS = dst.BlockSize
	}
	if err := x.check(); err != nil {
		me.failed = err.Error()
	} else {
		me.staging = x.staging
	}
	all := make([]int, w.Size())
	for i := range all {
		all[i] = i
	}
	g, err := w.Group(MetaGroup, all...)
	if err != nil {
		return Stats{}, fmt.Errorf("migrate: %w", err)
	}
	hs, err := exchange(ctx, g.Comm(rp.Rank), &me)
	if err == nil {
		err = verify(hs)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("migrate: rank %d: %w", rp.Rank, err)
	}
	x.peers = hs
	st, err := x.data(ctx)
	if err != nil {
		return st, fmt.Errorf("migrate: rank %d: %w", rp.Rank, err)
	}
	return st, nil
}

// run is one rank's migration.
type run struct {
	w        *comm.World
	rp       RankPlan
	src, dst *kvcache.Cache
	opt      Options
	staging  int      // values per staging buffer
	peers    []header // every rank's handshake, by rank
}

// check is the rank's local verdict: what the handshake reports when the
// rank cannot run its part.
func (x *run) check() error {
	rp, opt := &x.rp, &x.opt
	sb := opt.StagingBytes
	if sb == 0 {
		sb = DefaultStagingBytes
	}
	switch {
	case opt.Mode >= numModes:
		return fmt.Errorf("unknown mode %d", opt.Mode)
	case sb < 0 || sb%4 != 0 || sb/4 > math.MaxInt32:
		return fmt.Errorf("staging buffers of %d bytes, want a positive multiple of 4 below 2^33", sb)
	case rp.Ranks != x.w.Size():
		return fmt.Errorf("the plan covers %d ranks, the World has %d", rp.Ranks, x.w.Size())
	case rp.Layers <= 0 || rp.HeadDim <= 0 || rp.Layers > math.MaxInt32 || rp.HeadDim > math.MaxInt32:
		return fmt.Errorf("geometry of %d layers × head dim %d", rp.Layers, rp.HeadDim)
	case rp.Held.Lo < 0 || rp.Held.Hi <= rp.Held.Lo || rp.Holds.Lo < 0 || rp.Holds.Hi <= rp.Holds.Lo ||
		rp.Held.Hi > math.MaxInt32 || rp.Holds.Hi > math.MaxInt32:
		return fmt.Errorf("head ranges %s and %s", span(rp.Held), span(rp.Holds))
	}
	x.staging = sb / 4
	if err := x.checkCache("source", x.src, rp.Held, len(rp.Sends)+len(rp.Keeps)); err != nil {
		return err
	}
	if err := x.checkCache("destination", x.dst, rp.Holds, len(rp.Recvs)+len(rp.Keeps)); err != nil {
		return err
	}
	for _, side := range []struct {
		ts       []Transfer
		from, to bool // the transfer must start, end here
		role     string
	}{{rp.Sends, true, false, "send"}, {rp.Recvs, false, true, "receive"}, {rp.Keeps, true, true, "copy within the rank"}} {
		seen := make(map[[2]uint64]bool)
		for _, t := range side.ts {
			if err := x.checkTransfer(t, side.from, side.to, side.role); err != nil {
				return fmt.Errorf("request %d from rank %d to rank %d: %w", t.Req, t.From, t.To, err)
			}
			k := [2]uint64{uint64(t.Req), uint64(t.From*rp.Ranks + t.To)}
			if seen[k] {
				return fmt.Errorf("request %d from rank %d to rank %d listed twice", t.Req, t.From, t.To)
			}
			seen[k] = true
		}
	}
	for _, m := range rp.MetaSends {
		if m.From != rp.Rank || m.To == rp.Rank || m.To < 0 || m.To >= rp.Ranks {
			return fmt.Errorf("metadata of request %d sent from rank %d to rank %d", m.Req, m.From, m.To)
		}
	}
	for _, m := range rp.MetaRecvs {
		if m.To != rp.Rank || m.From == rp.Rank || m.From < 0 || m.From >= rp.Ranks {
			return fmt.Errorf("metadata of request %d received from rank %d by rank %d", m.Req, m.From, m.To)
		}
	}
	return x.checkBlocks()
}

// checkCache checks a cache that n transfers use. Caches of BF16 or F16
// keys and values are refused: the staging buffers and the wire order
// count float32 values.
func (x *run) checkCache(name string, c *kvcache.Cache, heads parallel.Span, n int) error {
	switch {
	case c == nil && n > 0:
		return fmt.Errorf("no %s cache for %d transfers", name, n)
	case c == nil:
		return nil
	case c.DType != tensor.F32:
		return fmt.Errorf("%s cache of %s keys and values: migrate moves float32 caches only", name, c.DType)
	case c.Layers != x.rp.Layers || c.HeadDim != x.rp.HeadDim || c.KVHeads != heads.Len():
		return fmt.Errorf("%s cache of %d layers × %d KV heads × head dim %d, want %d × %d (heads %s) × %d",
			name, c.Layers, c.KVHeads, c.HeadDim, x.rp.Layers, heads.Len(), span(heads), x.rp.HeadDim)
	}
	return nil
}

// checkTransfer checks that t starts (from) or ends (to) on this rank as
// its list says, stays inside the rank's head ranges and has block tables
// covering its context inside the caches.
func (x *run) checkTransfer(t Transfer, from, to bool, role string) error {
	rp := &x.rp
	switch {
	case (t.From == rp.Rank) != from || (t.To == rp.Rank) != to || t.From < 0 || t.From >= rp.Ranks || t.To < 0 || t.To >= rp.Ranks:
		return fmt.Errorf("listed on rank %d as a %s", rp.Rank, role)
	case t.Len < 0 || t.Len > math.MaxInt32:
		return fmt.Errorf("context length %d", t.Len)
	case t.Heads.Hi <= t.Heads.Lo:
		return fmt.Errorf("empty KV heads %s", span(t.Heads))
	case from && (t.Heads.Lo < rp.Held.Lo || t.Heads.Hi > rp.Held.Hi):
		return fmt.Errorf("KV heads %s outside the rank's heads %s", span(t.Heads), span(rp.Held))
	case to && (t.Heads.Lo < rp.Holds.Lo || t.Heads.Hi > rp.Holds.Hi):
		return fmt.Errorf("KV heads %s outside the rank's new heads %s", span(t.Heads), span(rp.Holds))
	}
	if from {
		if err := checkTable("source", t.Src, t.Len, x.src); err != nil {
			return err
		}
	}
	if to {
		if err := checkTable("destination", t.Dst, t.Len, x.dst); err != nil {
			return err
		}
	}
	return nil
}

func checkTable(name string, table []int, n int, c *kvcache.Cache) error {
	need := c.BlocksFor(n)
	if len(table) < need {
		return fmt.Errorf("%s table of %d blocks for %d tokens in blocks of %d", name, len(table), n, c.BlockSize)
	}
	for _, b := range table[:need] {
		if b < 0 || b >= c.NumBlocks {
			return fmt.Errorf("%s block %d outside the cache's %d", name, b, c.NumBlocks)
		}
	}
	return nil
}

// checkBlocks checks that no destination block is written for two
// requests or two positions, and, when the source and destination cache
// are one, that no block written is also read.
func (x *run) checkBlocks() error {
	type use struct {
		req RequestID
		i   int
	}
	written := make(map[int]use)
	for _, ts := range [][]Transfer{x.rp.Recvs, x.rp.Keeps} {
		for _, t := range ts {
			for i, b := range t.Dst[:x.dst.BlocksFor(t.Len)] {
				if u, ok := written[b]; ok && u != (use{t.Req, i}) {
					return fmt.Errorf("destination block %d is written for request %d and request %d", b, u.req, t.Req)
				}
				written[b] = use{t.Req, i}
			}
		}
	}
	if x.src != x.dst {
		return nil
	}
	for _, ts := range [][]Transfer{x.rp.Sends, x.rp.Keeps} {
		for _, t := range ts {
			for _, b := range t.Src[:x.src.BlocksFor(t.Len)] {
				if u, ok := written[b]; ok {
					return fmt.Errorf("block %d is read for request %d and written for request %d in the same cache", b, t.Req, u.req)
				}
			}
		}
	}
	return nil
}

// byPeer groups transfers by peer, each group in request order: the
// pair's wire order, the same on both sides.
func byPeer(ts []Transfer, peer func(Transfer) int) [][]Transfer {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b Transfer) int { return cmp.Or(cmp.Compare(peer(a), peer(b)), cmp.Compare(a.Req, b.Req)) })
	var out [][]Transfer
	for i := 0; i < len(ts); {
		j := i + 1
		for j < len(ts) && peer(ts[j]) == peer(ts[i]) {
			j++
		}
		out = append(out, ts[i:j])
		i = j
	}
	return out
}

// data runs the data phase: a goroutine per peer sent to and per peer
// received from, and the copies within the rank on the caller's.
func (x *run) data(ctx context.Context) (Stats, error) {
	var (
		st   Stats
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	report := func(s Stats, err error) {
		mu.Lock()
		defer mu.Unlock()
		st.SentBytes += s.SentBytes
		st.RecvBytes += s.RecvBytes
		st.Messages += s.Messages
		if err != nil {
			errs = append(errs, err)
			x.w.Abort(err) // wake the peers; a no-op after a failed comm call
		}
	}
	for _, ts := range byPeer(x.rp.Sends, func(t Transfer) int { return t.To }) {
		wg.Go(func() { report(x.sendTo(ctx, ts)) })
	}
	for _, ts := range byPeer(x.rp.Recvs, func(t Transfer) int { return t.From }) {
		wg.Go(func() { report(x.recvFrom(ctx, ts)) })
	}
	st.LocalBytes = x.keep()
	wg.Wait()
	return st, errors.Join(errs...)
}

// keep copies the heads the rank keeps from its source cache to its
// destination cache, page by page, and returns the bytes copied.
func (x *run) keep() int64 {
	if len(x.rp.Keeps) == 0 {
		return 0
	}
	it := pieces{ts: x.rp.Keeps, layers: x.rp.Layers, bs: x.src.BlockSize}
	src := side{c: x.src, base: x.rp.Held.Lo}
	dst := side{c: x.dst, base: x.rp.Holds.Lo, dst: true}
	var from, to [][]float32
	var n int64
	for p, ok := it.next(); ok; p, ok = it.next() {
		from, to = src.regions(from[:0], p), dst.regions(to[:0], p)
		n += copyRegions(to, from)
	}
	return 4 * n
}

// copyRegions copies the values of src, one region after another, into
// dst, which holds as many, and returns their number.
func copyRegions(dst, src [][]float32) int64 {
	var n int64
	i, off := 0, 0
	for _, s := range src {
		for len(s) > 0 {
			k := copy(dst[i][off:], s)
			s, off, n = s[k:], off+k, n+int64(k)
			if off == len(dst[i]) {
				i, off = i+1, 0
			}
		}
	}
	return n
}

// pair returns this rank's handle on the two-member group that carries
// KV from rank from to rank to.
func (x *run) pair(from, to int) (*comm.Comm, error) {
	g, err := x.w.Group(DataGroup, from, to)
	if err != nil {
		return nil, err
	}
	return g.Comm(x.rp.Rank), nil
}

// streamElems is the length of one pair's stream in values.
func (x *run) streamElems(ts []Transfer) int64 {
	var n int64
	for _, t := range ts {
		n += t.Elems(x.rp.Layers, x.rp.HeadDim)
	}
	return n
}

// chunks is how a stream of n values goes in messages: of size values
// each, the last one shorter, count of them.
func (x *run) chunks(n int64) (size int64, count int) {
	if n == 0 {
		return 0, 0
	}
	size = min(int64(x.staging), n)
	return size, int((n + size - 1) / size)
}

// buffers cuts a stream of n values into count messages of size values
// (chunks) and allocates the staging buffers they alternate between: two
// when pipelined (one filled while the other is in flight), one
// otherwise, never more than there are messages.
func (x *run) buffers(n int64) (size int64, count, nbuf int, bufs [][]float32) {
	size, count = x.chunks(n)
	nbuf = 2
	if x.opt.Mode == Unpipelined {
		nbuf = 1
	}
	bufs = make([][]float32, min(nbuf, count))
	for i := range bufs {
		bufs[i] = make([]float32, size)
	}
	return size, count, nbuf, bufs
}

// sendTo sends the pair's stream to one peer.
func (x *run) sendTo(ctx context.Context, ts []Transfer) (Stats, error) {
	peer := ts[0].To
	c, err := x.pair(x.rp.Rank, peer)
	if err != nil {
		return Stats{}, err
	}
	n := x.streamElems(ts)
	st := Stats{SentBytes: 4 * n}
	if x.opt.Mode == PerPage {
		err := x.perPage(ts, side{c: x.src, base: x.rp.Held.Lo}, x.src.BlockSize, x.peers[peer].dstBS, func(m []float32) error {
			st.Messages++
			return c.Send(ctx, m, 1)
		})
		if err != nil {
			return Stats{}, err
		}
		return st, nil
	}
	size, count, nbuf, bufs := x.buffers(n)
	st.Messages = count
	cur := &cursor{side: side{c: x.src, base: x.rp.Held.Lo}, it: pieces{ts: ts, layers: x.rp.Layers, bs: x.src.BlockSize}}
	h := x.opt.Hooks
	var pending *comm.Pending
	for i := range count {
		b := i % nbuf
		buf := bufs[b][:min(size, n-int64(i)*size)]
		if h != nil && h.Fill != nil {
			h.Fill(x.rp.Rank, peer, b)
		}
		err := cur.copy(buf, true)
		if pending != nil {
			// The other buffer's send: once it completes, that buffer is
			// free for the next fill.
			if werr := pending.Wait(); err == nil {
				err = werr
			}
			pending = nil
		}
		if err != nil {
			return Stats{}, err
		}
		pending = c.Start(ctx, func(ctx context.Context, c *comm.Comm) error {
			if h != nil && h.Send != nil {
				h.Send(x.rp.Rank, peer, b)
			}
			if err := c.Send(ctx, buf, 1); err != nil {
				return err
			}
			if h != nil && h.Sent != nil {
				h.Sent(x.rp.Rank, peer, b)
			}
			return nil
		})
		if nbuf == 1 {
			if err := pending.Wait(); err != nil {
				return Stats{}, err
			}
			pending = nil
		}
	}
	if pending != nil {
		if err := pending.Wait(); err != nil {
			return Stats{}, err
		}
	}
	return st, nil
}

// perPage walks a pair's stream one message per run that is contiguous
// on both sides (a whole page of the transfer's heads when the block sizes
// agree), calling msg with this side's slice of the cache. Pieces are cut
// every pieceBS tokens (the sender's block size); peerBS is the other
// side's block size.
func (x *run) perPage(ts []Transfer, me side, pieceBS, peerBS int, msg func([]float32) error) error {
	it := pieces{ts: ts, layers: x.rp.Layers, bs: pieceBS}
	var mine [][]float32
	var peer []extent
	for p, ok := it.next(); ok; p, ok = it.next() {
		mine, peer = me.regions(mine[:0], p), extents(peer[:0], peerBS, p)
		if err := cuts(mine, peer, x.rp.HeadDim, msg); err != nil {
			return err
		}
	}
	return nil
}

// recvFrom receives the pair's stream from one peer and unpacks it into
// the destination blocks, receiving the next message into one buffer
// while unpacking the other.
func (x *run) recvFrom(ctx context.Context, ts []Transfer) (Stats, error) {
	peer := ts[0].From
	c, err := x.pair(peer, x.rp.Rank)
	if err != nil {
		return Stats{}, err
	}
	n := x.streamElems(ts)
	st := Stats{RecvBytes: 4 * n}
	if x.opt.Mode == PerPage {
		err := x.perPage(ts, side{c: x.dst, base: x.rp.Holds.Lo, dst: true}, x.peers[peer].srcBS, x.peers[peer].srcBS, func(m []float32) error {
			return c.Recv(ctx, m, 0)
		})
		if err != nil {
			return Stats{}, err
		}
		return st, nil
	}
	size, count, nbuf, bufs := x.buffers(n)
	msg := func(i int) []float32 { return bufs[i%nbuf][:min(size, n-int64(i)*size)] }
	recv := func(i int) *comm.Pending {
		buf := msg(i)
		return c.Start(ctx, func(ctx context.Context, c *comm.Comm) error { return c.Recv(ctx, buf, 0) })
	}
	cur := &cursor{side: side{c: x.dst, base: x.rp.Holds.Lo, dst: true}, it: pieces{ts: ts, layers: x.rp.Layers, bs: x.peers[peer].srcBS}}
	var pending *comm.Pending
	if count > 0 {
		pending = recv(0)
	}
	for i := range count {
		if err := pending.Wait(); err != nil {
			return Stats{}, err
		}
		pending = nil
		if nbuf == 2 && i+1 < count {
			pending = recv(i + 1)
		}
		err := cur.copy(msg(i), false)
		if err != nil {
			if pending != nil {
				x.w.Abort(err)
				_ = pending.Wait()
			}
			return Stats{}, err
		}
		if nbuf == 1 && i+1 < count {
			pending = recv(i + 1)
		}
	}
	return st, nil
}
