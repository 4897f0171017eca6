package rankproc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/gearboxlm/gearbox/forward"
)

// Message kinds from the driver to the followers (the header's first
// byte), and from a follower to the driver (the reply's first byte).
const (
	kindStep     byte = 1 // a step: the payload is encodeStep's
	kindPing     byte = 2 // process 0 is alive (idle, or computing a long step)
	kindShutdown byte = 3 // no more steps

	replyAlive byte = 1 // the follower is still computing the step
	replyRows  byte = 2 // the follower's logits rows: encodeRows follows
)

// Control tags (comm.MPI.SendBytes) of the messages.
const (
	tagHeader  = 2
	tagPayload = 3
	tagLogits  = 4
	headerLen  = 9
)

var errShort = errors.New("rankproc: truncated message")

// header encodes a message's kind and its payload's length.
func header(kind byte, n int) []byte {
	h := make([]byte, headerLen)
	h[0] = kind
	binary.LittleEndian.PutUint64(h[1:], uint64(n))
	return h
}

func parseHeader(h []byte) (kind byte, n int, err error) {
	if len(h) != headerLen {
		return 0, 0, fmt.Errorf("rankproc: header of %d bytes, want %d", len(h), headerLen)
	}
	n64 := binary.LittleEndian.Uint64(h[1:])
	if n64 > math.MaxInt32 {
		return 0, 0, fmt.Errorf("rankproc: payload of %d bytes", n64)
	}
	return h[0], int(n64), nil
}

// encodeStep appends the step's placement name and batch to dst.
func encodeStep(dst []byte, placement string, b *forward.Batch) []byte {
	u := func(v int) { dst = binary.AppendUvarint(dst, uint64(v)) }
	u(len(placement))
	dst = append(dst, placement...)
	u(len(b.Seqs))
	for _, s := range b.Seqs {
		u(s.Pos)
		u(s.NumLogits)
		u(s.Replica)
		u(len(s.Tokens))
		for _, t := range s.Tokens {
			u(t)
		}
		u(len(s.Blocks))
		for _, k := range s.Blocks {
			u(k)
		}
	}
	return dst
}

// decodeStep is encodeStep's inverse. The batch's slices are new.
func decodeStep(p []byte) (string, *forward.Batch, error) {
	var err error
	u := func() int {
		v, n := binary.Uvarint(p)
		if n <= 0 || v > math.MaxInt32 {
			err = errShort
			return 0
		}
		p = p[n:]
		return int(v)
	}
	n := u()
	if err != nil || n > len(p) {
		return "", nil, errShort
	}
	name := string(p[:n])
	p = p[n:]
	seqs := u()
	if err != nil || seqs > len(p) {
		return "", nil, errShort
	}
	b := &forward.Batch{Seqs: make([]forward.SeqBatch, seqs)}
	for i := range b.Seqs {
		s := &b.Seqs[i]
		s.Pos, s.NumLogits, s.Replica = u(), u(), u()
		nt := u()
		if err != nil || nt > len(p) {
			return "", nil, errShort
		}
		s.Tokens = make([]int, nt)
		for j := range s.Tokens {
			s.Tokens[j] = u()
		}
		nb := u()
		if err != nil || nb > len(p) {
			return "", nil, errShort
		}
		s.Blocks = make([]int, nb)
		for j := range s.Blocks {
			s.Blocks[j] = u()
		}
	}
	if err != nil {
		return "", nil, err
	}
	if len(p) != 0 {
		return "", nil, fmt.Errorf("rankproc: %d bytes after the step", len(p))
	}
	return name, b, nil
}

// encodeRows appends the rows of out (rows of vocab logits) that rows
// names: the row count, the row indices, then their logits.
func encodeRows(dst []byte, rows []int, out []float32, vocab int) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(rows)))
	for _, r := range rows {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(r))
	}
	for _, r := range rows {
		dst = append(dst, floatBytes(out[r*vocab:(r+1)*vocab])...)
	}
	return dst
}

// floatBytes is f's memory as bytes: the wire format is the host's, and
// the MPI transport runs on little-endian linux/amd64 and linux/arm64.
func floatBytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

// rowsLen is the largest reply for a step of numLogits rows: its kind
// byte and encodeRows's message.
func rowsLen(numLogits, vocab int) int { return 1 + 4 + 4*numLogits + 4*numLogits*vocab }

// decodeRows writes the rows of an encodeRows message into out.
func decodeRows(p []byte, out []float32, vocab int) error {
	if len(p) < 4 {
		return errShort
	}
	n := int(binary.LittleEndian.Uint32(p))
	p = p[4:]
	if len(p) != 4*n+4*n*vocab {
		return fmt.Errorf("rankproc: logits message of %d bytes for %d rows of %d", len(p)+4, n, vocab)
	}
	rows := len(out) / vocab
	data := p[4*n:]
	for i := range n {
		r := int(binary.LittleEndian.Uint32(p[4*i:]))
		if r >= rows {
			return fmt.Errorf("rankproc: logits row %d of a step of %d rows", r, rows)
		}
		copy(floatBytes(out[r*vocab:(r+1)*vocab]), data[4*i*vocab:4*(i+1)*vocab])
	}
	return nil
}
