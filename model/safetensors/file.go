package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// MaxHeaderSize is the largest JSON header accepted, in bytes (100 MiB).
const MaxHeaderSize = 100 << 20

// MaxDims is the largest number of dimensions accepted in a tensor shape.
const MaxDims = 64

// metadataKey is the header entry holding free-form string metadata.
const metadataKey = "__metadata__"

// File is one parsed safetensors file. Its tensors are views into the
// file's bytes; see the package doc for lifetime and concurrency.
type File struct {
	name     string
	tensors  []*Tensor // sorted by name
	byName   map[string]*Tensor
	metadata map[string]string
	gaps     []Gap
	release  func() error // unmaps the file; nil when nothing to release
}

// Gap is a byte range [Begin, End) of a file's data section that no tensor
// covers, relative to the start of the data section. The reference writer
// never leaves gaps and its reader rejects them; this package accepts them
// and reports them through File.Gaps.
type Gap struct{ Begin, End int }

// Parse validates data as a safetensors file and returns views into it.
// name is used only in errors. data is not copied: it must stay unmodified
// for as long as the File's tensors are in use. Close on the result is a
// no-op.
func Parse(name string, data []byte) (*File, error) {
	header, body, err := splitHeader(name, data)
	if err != nil {
		return nil, err
	}
	f := &File{name: name, byName: make(map[string]*Tensor)}
	err = decodeObject(header, func(key string, raw json.RawMessage) error {
		if key == metadataKey {
			md, err := parseMetadata(raw)
			if err != nil {
				return &FormatError{File: name, Msg: "bad " + metadataKey, Err: err}
			}
			f.metadata = md
			return nil
		}
		t, err := parseEntry(name, key, raw, body)
		if err != nil {
			return err
		}
		f.tensors = append(f.tensors, t)
		f.byName[key] = t
		return nil
	})
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			return nil, err
		}
		if d, ok := err.(*duplicateKeyError); ok {
			return nil, &FormatError{File: name, Tensor: d.key, Msg: "duplicate name in header"}
		}
		return nil, &FormatError{File: name, Msg: "header is not a valid JSON object", Err: err}
	}
	if f.gaps, err = checkLayout(name, f.tensors, len(body)); err != nil {
		return nil, err
	}
	slices.SortFunc(f.tensors, func(a, b *Tensor) int { return strings.Compare(a.Name, b.Name) })
	return f, nil
}

// Name returns the file name given to Open or Parse.
func (f *File) Name() string { return f.name }

// Tensors returns the file's tensors sorted by name, in a new slice.
func (f *File) Tensors() []*Tensor { return slices.Clone(f.tensors) }

// Tensor returns the named tensor.
func (f *File) Tensor(name string) (*Tensor, bool) {
	t, ok := f.byName[name]
	return t, ok
}

// Metadata returns a copy of the header's __metadata__ map (nil if absent).
func (f *File) Metadata() map[string]string { return maps.Clone(f.metadata) }

// Gaps returns the ranges of the data section no tensor covers, in order
// (nil for a file written by the reference writer).
func (f *File) Gaps() []Gap { return slices.Clone(f.gaps) }

// Close releases the file's memory mapping, after which its tensors' Bytes
// must not be used. Close is idempotent.
func (f *File) Close() error {
	release := f.release
	f.release = nil
	if release == nil {
		return nil
	}
	if err := release(); err != nil {
		return fmt.Errorf("safetensors: closing %s: %w", f.name, err)
	}
	return nil
}

// splitHeader checks the length prefix and returns the JSON header and the
// data section.
func splitHeader(name string, data []byte) (header, body []byte, err error) {
	if len(data) < 8 {
		return nil, nil, &FormatError{File: name, Msg: fmt.Sprintf("file is %d bytes, shorter than the 8-byte header length", len(data))}
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize {
		return nil, nil, &FormatError{File: name, Msg: fmt.Sprintf("header length %d exceeds the %d-byte limit", n, MaxHeaderSize)}
	}
	if n > uint64(len(data)-8) {
		return nil, nil, &FormatError{File: name, Msg: fmt.Sprintf("header length %d exceeds the %d bytes after the length prefix (truncated file?)", n, len(data)-8)}
	}
	return data[8 : 8+n], data[8+n:], nil
}

// duplicateKeyError reports a key seen twice in one JSON object.
type duplicateKeyError struct{ key string }

func (e *duplicateKeyError) Error() string { return "duplicate key " + strconv.Quote(e.key) }

// decodeObject walks the JSON object in data, calling fn for each member in
// order. It fails on anything but exactly one object (surrounding
// whitespace allowed), on a duplicate key, or when fn fails.
func decodeObject(data []byte, fn func(key string, raw json.RawMessage) error) error {
	err := walkObject(data, fn)
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func walkObject(data []byte, fn func(key string, raw json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("expected a JSON object, found %s", describeToken(tok))
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok { // the decoder yields only strings in key position
			return fmt.Errorf("object key is %s", describeToken(tok))
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if seen[key] {
			return &duplicateKeyError{key}
		}
		seen[key] = true
		if err := fn(key, raw); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return err
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return fmt.Errorf("after the object: %w", err)
		}
		return fmt.Errorf("trailing data (%s) after the object", describeToken(tok))
	}
	return nil
}

func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '[':
			return "an array"
		case '{':
			return "an object"
		}
		return strconv.Quote(v.String())
	case string:
		return "a string"
	case nil:
		return "null"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// parseMetadata decodes the __metadata__ entry: an object of strings, or
// null.
func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	md := make(map[string]string)
	err := decodeObject(raw, func(key string, val json.RawMessage) error {
		var s string
		if err := json.Unmarshal(val, &s); err != nil || !isJSONString(val) {
			return fmt.Errorf("value of %q is not a string", key)
		}
		md[key] = s
		return nil
	})
	return md, err
}

func isJSONString(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '"'
}

// parseEntry validates one tensor entry of the header against the data
// section body and returns its view.
func parseEntry(file, name string, raw json.RawMessage, body []byte) (*Tensor, error) {
	bad := func(msg string, err error) error {
		return &FormatError{File: file, Tensor: name, Msg: msg, Err: err}
	}
	var dtypeRaw, shapeRaw, offsetsRaw json.RawMessage
	err := decodeObject(raw, func(key string, val json.RawMessage) error {
		switch key {
		case "dtype":
			dtypeRaw = val
		case "shape":
			shapeRaw = val
		case "data_offsets":
			offsetsRaw = val
		}
		return nil // other fields are ignored, as by the reference reader
	})
	if err != nil {
		return nil, bad("entry is not a valid JSON object", err)
	}
	if dtypeRaw == nil || shapeRaw == nil || offsetsRaw == nil {
		var missing []string
		for _, f := range []struct {
			key string
			raw json.RawMessage
		}{{"dtype", dtypeRaw}, {"shape", shapeRaw}, {"data_offsets", offsetsRaw}} {
			if f.raw == nil {
				missing = append(missing, f.key)
			}
		}
		return nil, bad("entry lacks "+strings.Join(missing, ", "), nil)
	}

	var ds string
	if err := json.Unmarshal(dtypeRaw, &ds); err != nil || !isJSONString(dtypeRaw) {
		return nil, bad("dtype is not a string: "+abbrev(dtypeRaw), nil)
	}
	dtype := DType(ds)
	size := dtype.Size()
	switch {
	case dtype.subByte():
		return nil, bad(fmt.Sprintf("dtype %s packs several values per byte", ds), ErrUnsupported)
	case size == 0:
		return nil, bad(fmt.Sprintf("unknown dtype %q", ds), nil)
	}

	dims, err := parseUints(shapeRaw, MaxDims)
	if err != nil {
		return nil, bad("bad shape", err)
	}
	shape := make([]int, len(dims))
	n, zero := uint64(1), false
	for i, d := range dims {
		if d > math.MaxInt {
			return nil, bad(fmt.Sprintf("shape dimension %d is %d, too large", i, d), nil)
		}
		shape[i] = int(d)
		zero = zero || d == 0
	}
	for _, d := range dims {
		if zero {
			n = 0
			break
		}
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > math.MaxInt {
			return nil, bad(fmt.Sprintf("shape %v overflows the element count", dims), nil)
		}
		n = lo
	}
	hi, nbytes := bits.Mul64(n, uint64(size))
	if hi != 0 || nbytes > math.MaxInt {
		return nil, bad(fmt.Sprintf("shape %v of %s overflows the byte count", dims, dtype), nil)
	}

	offs, err := parseUints(offsetsRaw, 2)
	if err == nil && len(offs) != 2 {
		err = fmt.Errorf("got %d", len(offs))
	}
	if err != nil {
		return nil, bad("data_offsets is not two integers", err)
	}
	begin, end := offs[0], offs[1]
	switch {
	case begin > end:
		return nil, bad(fmt.Sprintf("data_offsets [%d, %d] are not ascending", begin, end), nil)
	case end > uint64(len(body)):
		return nil, bad(fmt.Sprintf("data_offsets [%d, %d] lie outside the %d-byte data section", begin, end, len(body)), nil)
	case end-begin != nbytes:
		return nil, bad(fmt.Sprintf("data_offsets [%d, %d] span %d bytes, but shape %v of %s needs %d", begin, end, end-begin, dims, dtype, nbytes), nil)
	}
	return &Tensor{
		Name:  name,
		DType: dtype,
		Shape: shape,
		file:  file,
		n:     int(n),
		begin: int(begin),
		data:  body[begin:end:end],
	}, nil
}

// parseUints decodes a JSON array of at most max non-negative integers
// written without fraction or exponent.
func parseUints(raw json.RawMessage, max int) ([]uint64, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("expected an array, found %s", describeToken(tok))
	}
	var out []uint64
	for dec.More() {
		if len(out) == max {
			return nil, fmt.Errorf("more than %d elements", max)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("element %d is %s, not an integer", len(out), describeToken(tok))
		}
		s := string(num)
		v, err := strconv.ParseUint(s, 10, 64)
		switch {
		case strings.HasPrefix(s, "-"):
			return nil, fmt.Errorf("element %d is negative (%s)", len(out), s)
		case errors.Is(err, strconv.ErrRange):
			return nil, fmt.Errorf("element %d (%s) is out of range", len(out), s)
		case err != nil:
			return nil, fmt.Errorf("element %d (%s) is not an integer", len(out), s)
		}
		out = append(out, v)
	}
	if _, err := dec.Token(); err != nil { // the closing ']'
		return nil, err
	}
	return out, nil
}

// abbrev shortens raw JSON for an error message.
func abbrev(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// checkLayout rejects overlapping tensors and returns the gaps between
// them. Empty tensors hold no bytes and overlap nothing.
func checkLayout(file string, tensors []*Tensor, dataSize int) ([]Gap, error) {
	order := make([]*Tensor, 0, len(tensors))
	for _, t := range tensors {
		if len(t.data) > 0 {
			order = append(order, t)
		}
	}
	slices.SortFunc(order, func(a, b *Tensor) int { return cmp.Compare(a.begin, b.begin) })
	var gaps []Gap
	covered := 0 // end of the bytes claimed so far
	var last *Tensor
	for _, t := range order {
		begin, end := t.DataOffsets()
		if begin < covered {
			lb, le := last.DataOffsets()
			return nil, &FormatError{File: file, Tensor: t.Name, Msg: fmt.Sprintf("data_offsets [%d, %d] overlap tensor %q at [%d, %d]", begin, end, last.Name, lb, le)}
		}
		if begin > covered {
			gaps = append(gaps, Gap{covered, begin})
		}
		covered, last = end, t
	}
	if covered < dataSize {
		gaps = append(gaps, Gap{covered, dataSize})
	}
	return gaps, nil
}
