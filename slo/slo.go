package slo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strings"
	"time"
)

// ErrUnknownTier is wrapped by Resolve's error for a name no tier has.
var ErrUnknownTier = errors.New("unknown SLO tier")

// maxNameLen bounds a tier name, which travels in HTTP headers.
const maxNameLen = 64

// Tier is one service level. A request of the tier counts toward goodput
// only if it meets both targets.
type Tier struct {
	Name string
	TTFT time.Duration // time to first token; 0 for a background tier
	TPOT time.Duration // time per output token after the first; 0 for a background tier
	// Background marks work with no latency target, served with whatever
	// capacity the SLO tiers leave.
	Background bool
	// Default marks the tier of a request that names none; at most one
	// tier sets it.
	Default bool
}

// Set is a validated list of tiers in priority order (index 0 first).
type Set struct {
	tiers  []Tier
	byName map[string]int
	def    int
}

// New validates tiers, given in priority order, and returns their Set.
// The error names the offending tier and field.
func New(tiers []Tier) (*Set, error) {
	if len(tiers) == 0 {
		return nil, errors.New("no tiers: want at least one")
	}
	s := &Set{tiers: append([]Tier(nil), tiers...), byName: make(map[string]int, len(tiers)), def: -1}
	for i, t := range s.tiers {
		if err := checkTier(t); err != nil {
			return nil, fmt.Errorf("tiers[%d] (%q): %w", i, t.Name, err)
		}
		if j, dup := s.byName[t.Name]; dup {
			return nil, fmt.Errorf("tiers[%d]: name %q is already the name of tiers[%d]", i, t.Name, j)
		}
		s.byName[t.Name] = i
		if t.Default {
			if s.def >= 0 {
				return nil, fmt.Errorf("tiers[%d] (%q): default: tiers[%d] (%q) is already the default", i, t.Name, s.def, s.tiers[s.def].Name)
			}
			s.def = i
		}
	}
	if s.def < 0 {
		s.def = 0
	}
	return s, nil
}

func checkTier(t Tier) error {
	if err := checkName(t.Name); err != nil {
		return err
	}
	if t.Background {
		if t.TTFT != 0 || t.TPOT != 0 {
			return errors.New("a background tier has no ttft_ms or tpot_ms target")
		}
		return nil
	}
	if t.TTFT <= 0 {
		return fmt.Errorf("ttft_ms: must be positive, got %v", t.TTFT)
	}
	if t.TPOT <= 0 {
		return fmt.Errorf("tpot_ms: must be positive, got %v", t.TPOT)
	}
	return nil
}

func checkName(name string) error {
	if name == "" {
		return errors.New("name: must not be empty")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("name: longer than %d bytes", maxNameLen)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			return fmt.Errorf("name: %q is not allowed (use A-Z a-z 0-9 . _ -)", r)
		}
	}
	return nil
}

// Len is the number of tiers.
func (s *Set) Len() int { return len(s.tiers) }

// At returns tier i (0 ≤ i < Len), in priority order.
func (s *Set) At(i int) Tier { return s.tiers[i] }

// Tiers returns a copy of the tiers in priority order.
func (s *Set) Tiers() []Tier { return append([]Tier(nil), s.tiers...) }

// Default is the index of the tier a request that names none belongs to.
func (s *Set) Default() int { return s.def }

// Names lists the tier names in priority order.
func (s *Set) Names() []string {
	out := make([]string, len(s.tiers))
	for i, t := range s.tiers {
		out[i] = t.Name
	}
	return out
}

// Resolve returns the index of the tier called name, the default tier
// for "". Names are case-sensitive. For any other name the error wraps
// ErrUnknownTier and lists the known names.
func (s *Set) Resolve(name string) (int, error) {
	if name == "" {
		return s.def, nil
	}
	if i, ok := s.byName[name]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("%w %q (known: %s)", ErrUnknownTier, name, strings.Join(s.Names(), ", "))
}

// fileTier is one element of a tiers file. Pointers tell a missing
// target from a zero one.
type fileTier struct {
	Name       string   `json:"name"`
	TTFTms     *float64 `json:"ttft_ms"`
	TPOTms     *float64 `json:"tpot_ms"`
	Background bool     `json:"background"`
	Default    bool     `json:"default"`
}

// Load reads a --slo-tiers file (see the package doc for its format).
func Load(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("slo tiers: %w", err)
	}
	defer f.Close()
	s, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("slo tiers %s: %w", path, err)
	}
	return s, nil
}

// Parse reads a tiers file from r: a JSON array of objects with the
// fields name, ttft_ms, tpot_ms (positive milliseconds), background and
// default. Unknown fields are errors, so a misspelt target is not
// silently dropped; errors name the tier and field.
func Parse(r io.Reader) (*Set, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw []json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return nil, fmt.Errorf("want a JSON array of tiers, got a JSON %s", typ.Value)
		}
		return nil, fmt.Errorf("want a JSON array of tiers: %w", describeJSON(data, err))
	}
	if dec.More() {
		return nil, errors.New("unexpected data after the array of tiers")
	}
	tiers := make([]Tier, len(raw))
	for i, m := range raw {
		t, err := decodeTier(m)
		if err != nil {
			return nil, fmt.Errorf("tiers[%d]: %w", i, err)
		}
		tiers[i] = t
	}
	return New(tiers)
}

func decodeTier(m json.RawMessage) (Tier, error) {
	dec := json.NewDecoder(bytes.NewReader(m))
	dec.DisallowUnknownFields()
	var ft fileTier
	if err := dec.Decode(&ft); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field != "" {
			return Tier{}, fmt.Errorf("%s: want a %s, got a JSON %s", typ.Field, jsonKind(typ.Type.Kind()), typ.Value)
		}
		return Tier{}, err
	}
	t := Tier{Name: ft.Name, Background: ft.Background, Default: ft.Default}
	if ft.Background {
		if ft.TTFTms != nil || ft.TPOTms != nil {
			return Tier{}, fmt.Errorf("%q: a background tier has no ttft_ms or tpot_ms target", ft.Name)
		}
		return t, nil
	}
	var err error
	if t.TTFT, err = millis("ttft_ms", ft.TTFTms); err != nil {
		return Tier{}, fmt.Errorf("%q: %w", ft.Name, err)
	}
	if t.TPOT, err = millis("tpot_ms", ft.TPOTms); err != nil {
		return Tier{}, fmt.Errorf("%q: %w", ft.Name, err)
	}
	return t, nil
}

// millis converts a target in milliseconds, which must be present,
// positive and at most a day.
func millis(field string, ms *float64) (time.Duration, error) {
	if ms == nil {
		return 0, fmt.Errorf("%s: missing (a tier without targets must set \"background\": true)", field)
	}
	if !(*ms > 0) {
		return 0, fmt.Errorf("%s: must be positive, got %v", field, *ms)
	}
	if *ms > float64(24*time.Hour/time.Millisecond) {
		return 0, fmt.Errorf("%s: %v ms is more than a day", field, *ms)
	}
	d := time.Duration(math.Round(*ms * float64(time.Millisecond)))
	if d <= 0 {
		return 0, fmt.Errorf("%s: %v ms is below a nanosecond", field, *ms)
	}
	return d, nil
}

// jsonKind names a field's Go kind as its JSON type.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	default:
		return "number"
	}
}

// describeJSON adds the line and column to a JSON syntax error.
func describeJSON(data []byte, err error) error {
	var syn *json.SyntaxError
	if !errors.As(err, &syn) || syn.Offset < 0 || syn.Offset > int64(len(data)) {
		return err
	}
	off := syn.Offset
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := int(off) - bytes.LastIndexByte(data[:off], '\n')
	return fmt.Errorf("line %d, column %d: %w", line, col, err)
}
