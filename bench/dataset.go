package bench

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MooncakeBlockTokens is the prefix-block size of Mooncake traces: each
// hash id stands for 512 prompt tokens.
const MooncakeBlockTokens = 512

// Request is one request of a workload: when it arrives and how many tokens
// its prompt and completion have.
type Request struct {
	Index        int           // position in the workload, from 0
	Arrival      time.Duration // offset from the earliest request of a trace; 0 when the workload has no times
	InputTokens  int           // prompt tokens, ≥ 1
	OutputTokens int           // completion tokens asked for (max_tokens), ≥ 1
	// HashIDs are the Mooncake prefix blocks of the prompt, block i covering
	// tokens [512i, 512(i+1)); equal ids are equal text. Nil outside Mooncake.
	HashIDs []int
}

// Dataset is a workload: the requests in arrival order.
type Dataset struct {
	Spec     string    // as given, e.g. "azure:trace.csv"
	Timed    bool      // the requests carry arrival times from a trace
	Requests []Request // Index i at position i
}

// LoadDataset reads a workload from its spec: "azure:FILE" (Azure LLM
// inference trace CSV), "mooncake:FILE" (Mooncake trace JSONL) or
// "synthetic[:in=N,out=N,n=N]" (see ParseSynthetic; seed picks the lengths
// of range forms).
func LoadDataset(spec string, seed int64) (*Dataset, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	var (
		reqs  []Request
		timed bool
		err   error
	)
	switch kind {
	case "azure", "mooncake":
		if arg == "" {
			return nil, fmt.Errorf("dataset %q: want %s:FILE", spec, kind)
		}
		reqs, err = readFile(arg, kind)
		timed = true
	case "synthetic":
		var s SyntheticSpec
		if s, err = ParseSynthetic(arg); err == nil {
			reqs = Synthetic(s, seed)
		}
	default:
		return nil, fmt.Errorf("dataset %q: want azure:FILE, mooncake:FILE or synthetic[:in=N,out=N,n=N]", spec)
	}
	if err != nil {
		return nil, err
	}
	return &Dataset{Spec: spec, Timed: timed, Requests: reqs}, nil
}

func readFile(path, kind string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var reqs []Request
	if kind == "azure" {
		reqs, err = ReadAzure(f)
	} else {
		reqs, err = ReadMooncake(f)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return reqs, nil
}

// Head returns the first n requests of d (all when n ≤ 0 or n exceeds them).
func (d *Dataset) Head(n int) *Dataset {
	if n <= 0 || n >= len(d.Requests) {
		return d
	}
	c := *d
	c.Requests = d.Requests[:n]
	return &c
}

// ReadAzure reads an Azure LLM inference trace: a CSV with the header
// TIMESTAMP,ContextTokens,GeneratedTokens (any column order, names matched
// without regard to case) and timestamps like "2023-11-16 18:17:03.9799600".
// Arrivals are offsets from the earliest row; rows are returned in time
// order (the published traces are already sorted). A malformed row is an
// error that names its line.
func ReadAzure(r io.Reader) ([]Request, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("azure trace: header: %w", err)
	}
	col := map[string]int{"timestamp": -1, "contexttokens": -1, "generatedtokens": -1}
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		if _, ok := col[h]; ok {
			col[h] = i
		}
	}
	for name, i := range col {
		if i < 0 {
			return nil, fmt.Errorf("azure trace: line 1: no %s column in header %q", name, strings.Join(header, ","))
		}
	}
	var (
		reqs  []Request
		times []time.Time
	)
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("azure trace: %w", err)
		}
		if len(rec) != len(header) {
			return nil, fmt.Errorf("azure trace: line %d: %d fields, want %d", line, len(rec), len(header))
		}
		ts, err := parseAzureTime(rec[col["timestamp"]])
		if err != nil {
			return nil, fmt.Errorf("azure trace: line %d: %w", line, err)
		}
		in, err := positiveInt(rec[col["contexttokens"]], "ContextTokens")
		if err != nil {
			return nil, fmt.Errorf("azure trace: line %d: %w", line, err)
		}
		out, err := positiveInt(rec[col["generatedtokens"]], "GeneratedTokens")
		if err != nil {
			return nil, fmt.Errorf("azure trace: line %d: %w", line, err)
		}
		reqs = append(reqs, Request{InputTokens: in, OutputTokens: out})
		times = append(times, ts)
	}
	if len(reqs) == 0 {
		return nil, errors.New("azure trace: no rows")
	}
	first := slices.MinFunc(times, time.Time.Compare)
	for i := range reqs {
		reqs[i].Arrival = times[i].Sub(first)
	}
	return sortByArrival(reqs), nil
}

// parseAzureTime parses the trace's "YYYY-MM-DD HH:MM:SS.fffffff" (and, for
// the 2024 traces, the same with a zone offset).
func parseAzureTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02 15:04:05Z07:00", time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("TIMESTAMP %q: want YYYY-MM-DD HH:MM:SS.fffffff", s)
}

func positiveInt(s, name string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s %q: want a positive integer", name, s)
	}
	return n, nil
}

// mooncakeRow is one line of a Mooncake trace.
type mooncakeRow struct {
	Timestamp    *float64 `json:"timestamp"` // ms from the start of the trace
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []int    `json:"hash_ids"`
}

// ReadMooncake reads a Mooncake trace: JSON lines with timestamp (ms),
// input_length, output_length and hash_ids (prefix blocks of
// MooncakeBlockTokens tokens; there must be ceil(input_length/512) of them
// when present). Blank lines are skipped. Arrivals are offsets from the
// earliest row; rows are returned in time order. A malformed row is an
// error that names its line.
func ReadMooncake(r io.Reader) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var reqs []Request
	var ts []float64
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var row mooncakeRow
		if err := json.Unmarshal([]byte(text), &row); err != nil {
			return nil, fmt.Errorf("mooncake trace: line %d: %w", line, err)
		}
		switch {
		case row.Timestamp == nil || row.InputLength == nil || row.OutputLength == nil:
			return nil, fmt.Errorf("mooncake trace: line %d: want timestamp, input_length and output_length", line)
		case *row.Timestamp < 0 || math.IsNaN(*row.Timestamp):
			return nil, fmt.Errorf("mooncake trace: line %d: negative timestamp %v", line, *row.Timestamp)
		case *row.InputLength < 1 || *row.OutputLength < 1:
			return nil, fmt.Errorf("mooncake trace: line %d: input_length %d and output_length %d must be positive", line, *row.InputLength, *row.OutputLength)
		}
		if row.HashIDs != nil {
			if want := (*row.InputLength + MooncakeBlockTokens - 1) / MooncakeBlockTokens; len(row.HashIDs) != want {
				return nil, fmt.Errorf("mooncake trace: line %d: %d hash_ids for input_length %d, want %d", line, len(row.HashIDs), *row.InputLength, want)
			}
			for _, id := range row.HashIDs {
				if id < 0 {
					return nil, fmt.Errorf("mooncake trace: line %d: negative hash id %d", line, id)
				}
			}
		}
		reqs = append(reqs, Request{InputTokens: *row.InputLength, OutputTokens: *row.OutputLength, HashIDs: row.HashIDs})
		ts = append(ts, *row.Timestamp)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mooncake trace: %w", err)
	}
	if len(reqs) == 0 {
		return nil, errors.New("mooncake trace: no rows")
	}
	first := slices.Min(ts)
	for i := range reqs {
		reqs[i].Arrival = time.Duration((ts[i] - first) * float64(time.Millisecond))
	}
	return sortByArrival(reqs), nil
}

// sortByArrival orders requests by arrival, keeping file order for ties,
// and numbers them.
func sortByArrival(reqs []Request) []Request {
	slices.SortStableFunc(reqs, func(a, b Request) int { return cmp.Compare(a.Arrival, b.Arrival) })
	for i := range reqs {
		reqs[i].Index = i
	}
	return reqs
}

// SyntheticSpec describes a synthetic workload: N requests whose input and
// output lengths are drawn uniformly from [InMin, InMax] and [OutMin,
// OutMax] (fixed when min = max).
type SyntheticSpec struct {
	N              int
	InMin, InMax   int
	OutMin, OutMax int
}

// Default synthetic workload: vLLM's random dataset defaults (1000 prompts,
// 1024 input and 128 output tokens).
const (
	defaultSyntheticN   = 1000
	defaultSyntheticIn  = 1024
	defaultSyntheticOut = 128
)

// ParseSynthetic parses the part after "synthetic:": comma-separated
// in=N, out=N and n=N, where a length may be a range LO-HI. Missing keys
// take vLLM's random-dataset defaults (in=1024, out=128, n=1000).
func ParseSynthetic(s string) (SyntheticSpec, error) {
	spec := SyntheticSpec{N: defaultSyntheticN, InMin: defaultSyntheticIn, InMax: defaultSyntheticIn, OutMin: defaultSyntheticOut, OutMax: defaultSyntheticOut}
	if s == "" {
		return spec, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return spec, fmt.Errorf("synthetic dataset: %q: want key=value", kv)
		}
		lo, hi, err := parseRange(v)
		if err != nil {
			return spec, fmt.Errorf("synthetic dataset: %s: %w", k, err)
		}
		switch k {
		case "in":
			spec.InMin, spec.InMax = lo, hi
		case "out":
			spec.OutMin, spec.OutMax = lo, hi
		case "n":
			if lo != hi {
				return spec, fmt.Errorf("synthetic dataset: n=%s: want one number", v)
			}
			spec.N = lo
		default:
			return spec, fmt.Errorf("synthetic dataset: unknown key %q (want in, out, n)", k)
		}
	}
	return spec, nil
}

func parseRange(v string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(v, "-")
	if lo, err = strconv.Atoi(a); err != nil || lo < 1 {
		return 0, 0, fmt.Errorf("%q: want a positive integer or a range LO-HI", v)
	}
	hi = lo
	if isRange {
		if hi, err = strconv.Atoi(b); err != nil || hi < lo {
			return 0, 0, fmt.Errorf("%q: want a range LO-HI with LO ≤ HI", v)
		}
	}
	return lo, hi, nil
}

// Synthetic returns the requests of spec, all arriving at 0; range lengths
// are drawn from a stream seeded by seed.
func Synthetic(spec SyntheticSpec, seed int64) []Request {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed5eed))
	draw := func(lo, hi int) int {
		if lo == hi {
			return lo
		}
		return lo + rng.IntN(hi-lo+1)
	}
	reqs := make([]Request, spec.N)
	for i := range reqs {
		reqs[i] = Request{Index: i, InputTokens: draw(spec.InMin, spec.InMax), OutputTokens: draw(spec.OutMin, spec.OutMax)}
	}
	return reqs
}
