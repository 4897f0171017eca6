package safetensors

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gearboxlm/gearbox/internal/pyjson"
)

// WriteTensor is one tensor to write. Exactly one of Data and Raw is set:
// Data holds the values in row-major order, converted on write to DType
// (F32, F16 or BF16, rounding to nearest even); Raw holds data already
// encoded little-endian in DType, which may then be any whole-byte dtype.
type WriteTensor struct {
	Name  string
	DType DType
	Shape []int // nil or empty for a scalar
	Data  []float32
	Raw   []byte
}

// Write writes tensors and metadata (may be nil) to w as one safetensors
// file, laid out as the reference writer lays it out: header entries and
// data ordered by dtype (widest first, so every tensor is aligned to its
// element size) then name, the header padded with spaces to a multiple of
// 8 bytes, no gaps. Invalid input (duplicate or empty names, a shape that
// does not match the data, an unknown dtype) is reported before anything
// is written.
func Write(w io.Writer, tensors []WriteTensor, metadata map[string]string) error {
	if err := validateWrite(tensors); err != nil {
		return err
	}
	order := slices.Clone(tensors)
	slices.SortStableFunc(order, func(a, b WriteTensor) int {
		if c := cmp.Compare(dtypeInfo[b.DType].rank, dtypeInfo[a.DType].rank); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	header, err := encodeHeader(order, metadata)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(header)))
	bw.Write(prefix[:])
	bw.Write(header)
	buf := make([]byte, 1<<15)
	for _, t := range order {
		if t.Raw != nil {
			bw.Write(t.Raw)
			continue
		}
		size := t.DType.Size()
		for data := t.Data; len(data) > 0; {
			chunk := data[:min(len(data), len(buf)/size)]
			encode(buf, t.DType, chunk)
			if _, err := bw.Write(buf[:len(chunk)*size]); err != nil {
				break // bufio keeps the error; Flush reports it
			}
			data = data[len(chunk):]
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	return nil
}

// WriteFile writes tensors and metadata to a new file at path (see Write),
// replacing any existing file. On error the partial file is removed.
func WriteFile(path string, tensors []WriteTensor, metadata map[string]string) error {
	if err := validateWrite(tensors); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	err = Write(f, tensors, metadata)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("safetensors: %w", cerr)
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// ShardName returns the file name transformers gives shard i (1-based) of
// n: model-0000i-of-0000n.safetensors.
func ShardName(i, n int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n)
}

// WriteSharded writes tensors into dir (created if needed) as transformers'
// save_pretrained writes a sharded checkpoint: shards files named by
// ShardName, each with metadata {"format": "pt"}, and
// model.safetensors.index.json with metadata total_parameters and
// total_size (tensor bytes) and the weight_map, keys sorted, indented by
// two spaces, non-ASCII escaped, newline-terminated. Tensors keep their
// order and are split into contiguous runs of roughly equal byte size;
// every shard holds at least one tensor, so 1 ≤ shards ≤ len(tensors).
// (transformers writes an unsharded model as model.safetensors with no
// index; use WriteFile with SingleName for that.)
func WriteSharded(dir string, tensors []WriteTensor, shards int) error {
	if err := validateWrite(tensors); err != nil {
		return err
	}
	if shards < 1 || shards > len(tensors) || shards > 99999 {
		return fmt.Errorf("safetensors: cannot write %d tensors as %d shards", len(tensors), shards)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	weightMap := make(map[string]string, len(tensors))
	var params, size int
	for i, run := range splitShards(tensors, shards) {
		name := ShardName(i+1, shards)
		if err := WriteFile(filepath.Join(dir, name), run, map[string]string{"format": "pt"}); err != nil {
			return err
		}
		for _, t := range run {
			weightMap[t.Name] = name
			n, _ := numElements(t.Shape)
			params += n
			size += n * t.DType.Size()
		}
	}
	return writeIndex(filepath.Join(dir, IndexName), weightMap, params, size)
}

// splitShards cuts tensors into n contiguous non-empty runs, starting a new
// run when the current one would pass its share of the total bytes.
func splitShards(tensors []WriteTensor, n int) [][]WriteTensor {
	sizes := make([]int, len(tensors))
	total := 0
	for i, t := range tensors {
		e, _ := numElements(t.Shape)
		sizes[i] = e * t.DType.Size()
		total += sizes[i]
	}
	runs := make([][]WriteTensor, 0, n)
	start, acc := 0, 0
	for i := range tensors {
		k := len(runs) // index of the run being filled
		if i > start && k < n-1 {
			mustCut := len(tensors)-i == n-1-k
			// Cut when this tensor's midpoint lies past run k's share.
			if mustCut || (acc+sizes[i]/2)*n >= total*(k+1) {
				runs = append(runs, tensors[start:i])
				start = i
			}
		}
		acc += sizes[i]
	}
	return append(runs, tensors[start:])
}

// writeIndex writes the index byte-for-byte as Python's
// json.dumps(index, indent=2, sort_keys=True) + "\n".
func writeIndex(path string, weightMap map[string]string, params, size int) error {
	var b strings.Builder
	b.WriteString("{\n  \"metadata\": {\n")
	fmt.Fprintf(&b, "    \"total_parameters\": %d,\n    \"total_size\": %d\n  },\n", params, size)
	b.WriteString("  \"weight_map\": {\n")
	names := make([]string, 0, len(weightMap))
	for name := range weightMap {
		names = append(names, name)
	}
	sort.Strings(names) // byte order of UTF-8 is code point order, as in Python
	for i, name := range names {
		b.WriteString("    ")
		pyjson.Quote(&b, name, true)
		b.WriteString(": ")
		pyjson.Quote(&b, weightMap[name], true)
		if i < len(names)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("  }\n}\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// numElements is the product of shape, or an error if a dimension is
// negative or the product overflows int.
func numElements(shape []int) (int, error) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
	}
	for _, d := range shape {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return 0, fmt.Errorf("shape %v overflows the element count", shape)
		}
		n = lo
	}
	return int(n), nil
}

// validateWrite checks every tensor before anything is written.
func validateWrite(tensors []WriteTensor) error {
	seen := make(map[string]bool, len(tensors))
	var errs []error
	for i, t := range tensors {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("safetensors: write tensor %d %q: %s", i, t.Name, fmt.Sprintf(format, args...)))
		}
		switch {
		case t.Name == "":
			bad("empty name")
		case t.Name == metadataKey:
			bad("name is reserved for metadata")
		case !utf8.ValidString(t.Name):
			bad("name is not valid UTF-8")
		case seen[t.Name]:
			bad("duplicate name")
		}
		seen[t.Name] = true
		size := t.DType.Size()
		if size == 0 {
			bad("unknown dtype %q", t.DType)
			continue
		}
		n, err := numElements(t.Shape)
		if err != nil {
			bad("%v", err)
			continue
		}
		if n > math.MaxInt/size {
			bad("shape %v of %s overflows the byte count", t.Shape, t.DType)
			continue
		}
		switch {
		case t.Raw != nil && t.Data != nil:
			bad("both Data and Raw are set")
		case t.Raw != nil && len(t.Raw) != n*size:
			bad("Raw has %d bytes, shape %v of %s needs %d", len(t.Raw), t.Shape, t.DType, n*size)
		case t.Raw == nil && !t.DType.Float():
			errs = append(errs, fmt.Errorf("safetensors: write tensor %d %q: %w: Data cannot be written as %s (use Raw)", i, t.Name, ErrUnsupported, t.DType))
		case t.Raw == nil && len(t.Data) != n:
			bad("Data has %d values, shape %v needs %d", len(t.Data), t.Shape, n)
		}
	}
	return errors.Join(errs...)
}

// encodeHeader returns the JSON header for tensors in data order, padded
// with spaces to a multiple of 8 bytes.
func encodeHeader(order []WriteTensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	str := func(s string) {
		enc.Encode(s) // cannot fail for a string
		b.Truncate(b.Len() - 1)
	}
	b.WriteByte('{')
	if metadata != nil {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(`"` + metadataKey + `":{`)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			str(k)
			b.WriteByte(':')
			str(metadata[k])
		}
		b.WriteByte('}')
	}
	offset := 0
	for i, t := range order {
		if i > 0 || metadata != nil {
			b.WriteByte(',')
		}
		n, _ := numElements(t.Shape)
		nbytes := n * t.DType.Size()
		str(t.Name)
		b.WriteString(`:{"dtype":`)
		str(string(t.DType))
		b.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, offset, offset+nbytes)
		offset += nbytes
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > MaxHeaderSize {
		return nil, fmt.Errorf("safetensors: write: header of %d bytes exceeds the %d-byte limit", b.Len(), MaxHeaderSize)
	}
	return b.Bytes(), nil
}
