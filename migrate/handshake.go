package migrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gearboxlm/gearbox/comm"
	"github.com/gearboxlm/gearbox/parallel"
)

// ErrHandshake is wrapped by the error every rank returns when the
// handshake finds that the ranks disagree, or that one of them cannot run
// its part. Nothing has moved or changed then, and the World stays usable.
var ErrHandshake = errors.New("migrate: handshake failed")

// The handshake (spec K5): before any KV byte moves, every rank publishes
// what it is about to do, as a header and one record per transfer, with
// two all-gathers over the World's ranks (the record count, then the
// records as 32-bit words carried bit for bit in float32s). Every rank
// then runs the same checks on the same data, so all reach one verdict
// and return identical errors.

// recKind is what a record says a rank will do.
type recKind uint32

const (
	recSend     recKind = iota // sends KV heads to peer
	recRecv                    // receives KV heads from peer
	recKeep                    // copies KV heads within the rank
	recMetaSend                // sends a waiting request's metadata to peer
	recMetaRecv                // receives a waiting request's metadata from peer
	numRecKinds
)

// record is one transfer as its rank sees it.
type record struct {
	kind  recKind
	req   RequestID
	heads parallel.Span
	len   int
	peer  int
}

const recordWords = 7

// header is one rank's part of the handshake.
type header struct {
	rank            int
	failed          string // the rank's local error; "" when it can run
	layers, headDim int
	srcBS, dstBS    int // 0 without that cache
	staging         int // values per staging buffer
	mode            Mode
	held, holds     parallel.Span
	recs            []record
}

const headerWords = 13

// records lists rp's transfers as handshake records.
func records(rp *RankPlan) []record {
	var out []record
	add := func(k recKind, ts []Transfer, peer func(Transfer) int) {
		for _, t := range ts {
			out = append(out, record{kind: k, req: t.Req, heads: t.Heads, len: t.Len, peer: peer(t)})
		}
	}
	add(recSend, rp.Sends, func(t Transfer) int { return t.To })
	add(recRecv, rp.Recvs, func(t Transfer) int { return t.From })
	add(recKeep, rp.Keeps, func(t Transfer) int { return t.To })
	for _, m := range rp.MetaSends {
		out = append(out, record{kind: recMetaSend, req: m.Req, peer: m.To})
	}
	for _, m := range rp.MetaRecvs {
		out = append(out, record{kind: recMetaRecv, req: m.Req, peer: m.From})
	}
	return out
}

// encode writes h as 32-bit words. A failed header carries its message
// and no records. Every number has been validated to fit.
func (h *header) encode() []uint32 {
	msg := []byte(h.failed)
	recs := h.recs
	if h.failed != "" {
		recs = nil
	}
	w := make([]uint32, 0, headerWords+recordWords*len(recs)+(len(msg)+3)/4)
	w = append(w, uint32(h.rank), uint32(len(msg)), uint32(h.layers), uint32(h.headDim),
		uint32(h.srcBS), uint32(h.dstBS), uint32(h.staging), uint32(h.mode),
		uint32(h.held.Lo), uint32(h.held.Hi), uint32(h.holds.Lo), uint32(h.holds.Hi), uint32(len(recs)))
	for _, r := range recs {
		w = append(w, uint32(r.kind), uint32(r.req), uint32(r.req>>32),
			uint32(r.heads.Lo), uint32(r.heads.Hi), uint32(r.len), uint32(r.peer))
	}
	for i := 0; i < len(msg); i += 4 {
		var v uint32
		for j := 0; j < 4 && i+j < len(msg); j++ {
			v |= uint32(msg[i+j]) << (8 * j)
		}
		w = append(w, v)
	}
	return w
}

// decode reads a header written by encode.
func decode(w []uint32) (header, error) {
	if len(w) < headerWords {
		return header{}, fmt.Errorf("%d words, want at least %d", len(w), headerWords)
	}
	h := header{
		rank: int(w[0]), layers: int(w[2]), headDim: int(w[3]), srcBS: int(w[4]), dstBS: int(w[5]),
		staging: int(w[6]), mode: Mode(w[7]),
		held:  parallel.Span{Lo: int(w[8]), Hi: int(w[9])},
		holds: parallel.Span{Lo: int(w[10]), Hi: int(w[11])},
	}
	msgLen, n := int(w[1]), int(w[12])
	if want := headerWords + recordWords*n + (msgLen+3)/4; len(w) != want {
		return header{}, fmt.Errorf("%d words, want %d for %d records and a %d-byte message", len(w), want, n, msgLen)
	}
	w = w[headerWords:]
	for range n {
		r := record{kind: recKind(w[0]), req: RequestID(w[1]) | RequestID(w[2])<<32,
			heads: parallel.Span{Lo: int(w[3]), Hi: int(w[4])}, len: int(w[5]), peer: int(w[6])}
		if r.kind >= numRecKinds {
			return header{}, fmt.Errorf("record kind %d", r.kind)
		}
		h.recs = append(h.recs, r)
		w = w[recordWords:]
	}
	msg := make([]byte, 0, msgLen)
	for i := 0; i < msgLen; i++ {
		msg = append(msg, byte(w[i/4]>>(8*(i%4))))
	}
	h.failed = string(msg)
	return h, nil
}

// exchange gathers every rank's header over c, a group of all the
// World's ranks in rank order.
func exchange(ctx context.Context, c *comm.Comm, mine *header) ([]header, error) {
	words := mine.encode()
	send := make([]float32, len(words))
	for i, v := range words {
		send[i] = math.Float32frombits(v)
	}
	sizes := make([]float32, c.Size())
	if err := c.AllGather(ctx, []float32{math.Float32frombits(uint32(len(send)))}, sizes); err != nil {
		return nil, err
	}
	counts := make([]int, len(sizes))
	total := 0
	for i, s := range sizes {
		counts[i] = int(math.Float32bits(s))
		total += counts[i]
	}
	all := make([]float32, total)
	if err := c.AllGatherV(ctx, send, all, counts); err != nil {
		return nil, err
	}
	hs := make([]header, len(counts))
	for r, n := range counts {
		w := make([]uint32, n)
		for i := range w {
			w[i] = math.Float32bits(all[i])
		}
		all = all[n:]
		h, err := decode(w)
		if err == nil && h.rank != r {
			err = fmt.Errorf("header of rank %d", h.rank)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: rank %d sent a malformed handshake: %v", ErrHandshake, r, err)
		}
		hs[r] = h
	}
	return hs, nil
}

// verify checks that the ranks can run their parts and agree on every
// transfer: the same geometry and options; for every ordered pair of
// ranks, the sender's records for the receiver are the receiver's
// records for the sender (request, KV heads, context length); one context
// length per request; and on every rank the heads each request sends
// and keeps tile the rank's old range, and those it receives and keeps
// tile its new range. It returns the first failure in a fixed order, so
// every rank returns the same error.
func verify(hs []header) error {
	for _, h := range hs {
		if h.failed != "" {
			return fmt.Errorf("%w: rank %d cannot run its part: %s", ErrHandshake, h.rank, h.failed)
		}
	}
	h0 := &hs[0]
	for _, h := range hs[1:] {
		if h.layers != h0.layers || h.headDim != h0.headDim {
			return fmt.Errorf("%w: rank %d has %d layers of head dim %d, rank 0 has %d of %d", ErrHandshake, h.rank, h.layers, h.headDim, h0.layers, h0.headDim)
		}
		if h.mode != h0.mode || h.staging != h0.staging {
			return fmt.Errorf("%w: rank %d runs %s with %d-value staging buffers, rank 0 %s with %d", ErrHandshake, h.rank, h.mode, h.staging, h0.mode, h0.staging)
		}
	}
	if err := verifyPairs(hs); err != nil {
		return err
	}
	if err := verifyLengths(hs); err != nil {
		return err
	}
	return verifyTiling(hs)
}

// pairKey names the records one rank has for one peer, of one direction.
type pairKey struct {
	rank, peer int
	kind       recKind
}

// verifyPairs matches every send with its receive, KV and metadata alike.
func verifyPairs(hs []header) error {
	idx := make(map[pairKey]map[RequestID]record)
	for _, h := range hs {
		for _, r := range h.recs {
			if r.peer >= len(hs) || (r.peer == h.rank) != (r.kind == recKeep) {
				return fmt.Errorf("%w: request %d: rank %d names rank %d as a peer", ErrHandshake, r.req, h.rank, r.peer)
			}
			k := pairKey{h.rank, r.peer, r.kind}
			m := idx[k]
			if m == nil {
				m = make(map[RequestID]record)
				idx[k] = m
			}
			if _, dup := m[r.req]; dup {
				return fmt.Errorf("%w: request %d: rank %d lists it twice for rank %d", ErrHandshake, r.req, h.rank, r.peer)
			}
			m[r.req] = r
		}
	}
	for s := range hs {
		for d := range hs {
			if s == d {
				continue
			}
			if err := matchPair(s, d, idx[pairKey{s, d, recSend}], idx[pairKey{d, s, recRecv}], false); err != nil {
				return err
			}
			if err := matchPair(s, d, idx[pairKey{s, d, recMetaSend}], idx[pairKey{d, s, recMetaRecv}], true); err != nil {
				return err
			}
		}
	}
	return nil
}

// matchPair checks rank s's sends to d against d's receives from s.
func matchPair(s, d int, sends, recvs map[RequestID]record, meta bool) error {
	ids := make([]RequestID, 0, len(sends)+len(recvs))
	for id := range sends {
		ids = append(ids, id)
	}
	for id := range recvs {
		if _, ok := sends[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	what := func(r record) string {
		if meta {
			return "the metadata of waiting request"
		}
		return fmt.Sprintf("KV heads %s of %d tokens of request", span(r.heads), r.len)
	}
	for _, id := range ids {
		a, sent := sends[id]
		b, expected := recvs[id]
		switch {
		case !expected:
			return fmt.Errorf("%w: rank %d sends %s %d to rank %d, which expects nothing of it from rank %d", ErrHandshake, s, what(a), id, d, s)
		case !sent:
			return fmt.Errorf("%w: rank %d expects %s %d from rank %d, which sends nothing of it to rank %d", ErrHandshake, d, what(b), id, s, d)
		case a.heads != b.heads || a.len != b.len:
			return fmt.Errorf("%w: rank %d sends %s %d to rank %d, which expects %s %d", ErrHandshake, s, what(a), id, d, what(b), id)
		}
	}
	return nil
}

// verifyLengths checks that every rank sees each request with the same
// context length, and as running or waiting alike.
func verifyLengths(hs []header) error {
	type seen struct {
		rank, len int
		waiting   bool
	}
	first := make(map[RequestID]seen)
	for _, h := range hs {
		for _, r := range h.recs {
			w := r.kind == recMetaSend || r.kind == recMetaRecv
			f, ok := first[r.req]
			switch {
			case !ok:
				first[r.req] = seen{h.rank, r.len, w}
			case f.waiting != w:
				return fmt.Errorf("%w: request %d is %s on rank %d and %s on rank %d", ErrHandshake, r.req, state(f.waiting), f.rank, state(w), h.rank)
			case f.len != r.len:
				return fmt.Errorf("%w: request %d has %d tokens on rank %d and %d on rank %d", ErrHandshake, r.req, f.len, f.rank, r.len, h.rank)
			}
		}
	}
	return nil
}

func state(waiting bool) string {
	if waiting {
		return "waiting"
	}
	return "running"
}

// verifyTiling checks, per rank and request, that the heads sent and kept
// are exactly the rank's old range and the heads received and kept
// exactly its new range: every head leaves once and arrives once.
func verifyTiling(hs []header) error {
	for _, h := range hs {
		out := make(map[RequestID][]parallel.Span)
		in := make(map[RequestID][]parallel.Span)
		for _, r := range h.recs {
			switch r.kind {
			case recSend:
				out[r.req] = append(out[r.req], r.heads)
			case recRecv:
				in[r.req] = append(in[r.req], r.heads)
			case recKeep:
				out[r.req] = append(out[r.req], r.heads)
				in[r.req] = append(in[r.req], r.heads)
			}
		}
		for _, side := range []struct {
			spans map[RequestID][]parallel.Span
			want  parallel.Span
			verb  string
		}{{out, h.held, "sends and keeps"}, {in, h.holds, "receives and keeps"}} {
			ids := make([]RequestID, 0, len(side.spans))
			for id := range side.spans {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				if got := side.spans[id]; !tiles(got, side.want) {
					return fmt.Errorf("%w: request %d: rank %d %s KV heads %s, not exactly its heads %s", ErrHandshake, id, h.rank, side.verb, spans(got), span(side.want))
				}
			}
		}
	}
	return nil
}

// tiles reports whether the spans, sorted, cover want exactly once.
func tiles(ss []parallel.Span, want parallel.Span) bool {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b parallel.Span) int { return cmp.Compare(a.Lo, b.Lo) })
	at := want.Lo
	for _, s := range ss {
		if s.Lo != at || s.Hi <= s.Lo {
			return false
		}
		at = s.Hi
	}
	return at == want.Hi
}

func span(s parallel.Span) string { return fmt.Sprintf("[%d,%d)", s.Lo, s.Hi) }

func spans(ss []parallel.Span) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += span(s)
	}
	return out
}
