package slo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTable1(t *testing.T) {
	s, err := Load("../examples/slo-tiers/llama-3.1-8b-h100.json")
	if err != nil {
		t.Fatal(err)
	}
	want := []Tier{
		{Name: "strict", TTFT: 300 * time.Millisecond, TPOT: 10 * time.Millisecond},
		{Name: "loose", TTFT: 300 * time.Millisecond, TPOT: 20 * time.Millisecond},
	}
	got := s.Tiers()
	if len(got) != len(want) {
		t.Fatalf("got %d tiers, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("tier %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if s.Default() != 0 {
		t.Errorf("default = %d, want 0 (the first tier)", s.Default())
	}
}

func TestExampleFilesParse(t *testing.T) {
	files, err := filepath.Glob("../examples/slo-tiers/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("found %d example files, want the 4 of Table 1", len(files))
	}
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for i := range s.Len() {
			tr := s.At(i)
			if tr.Background || tr.TTFT < 100*time.Millisecond || tr.TPOT < 5*time.Millisecond {
				t.Errorf("%s: tier %+v is not a Table 1 tier", f, tr)
			}
		}
	}
}

func TestParseFields(t *testing.T) {
	s, err := Parse(strings.NewReader(`[
		{"name": "chat", "ttft_ms": 250.5, "tpot_ms": 0.5},
		{"name": "code", "ttft_ms": 1000, "tpot_ms": 40, "default": true},
		{"name": "batch", "background": true}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.At(0); got.TTFT != 250500*time.Microsecond || got.TPOT != 500*time.Microsecond {
		t.Errorf("chat = %v/%v, want 250.5ms/500µs", got.TTFT, got.TPOT)
	}
	if got := s.At(2); !got.Background || got.TTFT != 0 || got.TPOT != 0 {
		t.Errorf("batch = %+v, want a background tier with no targets", got)
	}
	if s.Default() != 1 {
		t.Errorf("default = %d, want 1", s.Default())
	}
	if got := strings.Join(s.Names(), ","); got != "chat,code,batch" {
		t.Errorf("names %q", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"empty file", ``, "want a JSON array"},
		{"not an array", `{"name": "a"}`, "want a JSON array of tiers, got a JSON object"},
		{"syntax", "[\n {\"name\": \"a\",, }\n]", "line 2, column"},
		{"trailing data", `[{"name":"a","ttft_ms":1,"tpot_ms":1}] []`, "after the array"},
		{"no tiers", `[]`, "at least one"},
		{"missing ttft", `[{"name": "a", "tpot_ms": 10}]`, `tiers[0]: "a": ttft_ms: missing`},
		{"zero ttft", `[{"name": "a", "ttft_ms": 0, "tpot_ms": 10}]`, `tiers[0]: "a": ttft_ms: must be positive, got 0`},
		{"negative tpot", `[{"name":"a","ttft_ms":1,"tpot_ms":1},{"name": "b", "ttft_ms": 300, "tpot_ms": -5}]`, `tiers[1]: "b": tpot_ms: must be positive, got -5`},
		{"tiny tpot", `[{"name": "a", "ttft_ms": 300, "tpot_ms": 1e-9}]`, "below a nanosecond"},
		{"huge ttft", `[{"name": "a", "ttft_ms": 1e300, "tpot_ms": 1}]`, "more than a day"},
		{"string target", `[{"name": "a", "ttft_ms": "300", "tpot_ms": 1}]`, `tiers[0]: ttft_ms: want a number, got a JSON string`},
		{"unknown field", `[{"name": "a", "ttft": 300, "tpot_ms": 1}]`, `tiers[0]: json: unknown field "ttft"`},
		{"duplicate name", `[{"name":"a","ttft_ms":1,"tpot_ms":1},{"name":"b","ttft_ms":1,"tpot_ms":1},{"name":"a","ttft_ms":2,"tpot_ms":2}]`, `tiers[2]: name "a" is already the name of tiers[0]`},
		{"empty name", `[{"ttft_ms": 1, "tpot_ms": 1}]`, `tiers[0] (""): name: must not be empty`},
		{"bad name", `[{"name": "a b", "ttft_ms": 1, "tpot_ms": 1}]`, `name: ' ' is not allowed`},
		{"long name", `[{"name": "` + strings.Repeat("x", 65) + `", "ttft_ms": 1, "tpot_ms": 1}]`, "longer than 64"},
		{"background with target", `[{"name": "bg", "background": true, "tpot_ms": 50}]`, `tiers[0]: "bg": a background tier has no`},
		{"two defaults", `[{"name":"a","ttft_ms":1,"tpot_ms":1,"default":true},{"name":"b","background":true,"default":true}]`, `tiers[1] ("b"): default: tiers[0] ("a") is already the default`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestLoadNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiers.json")
	if err := os.WriteFile(path, []byte(`[{"name": "a", "ttft_ms": -1, "tpot_ms": 1}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "ttft_ms") {
		t.Fatalf("error %v, want the path and the field", err)
	}
	_, err = Load(filepath.Join(t.TempDir(), "missing.json"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v, want one wrapping os.ErrNotExist", err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, c := range []struct {
		name  string
		tiers []Tier
		want  string
	}{
		{"zero ttft", []Tier{{Name: "a", TPOT: time.Millisecond}}, "ttft_ms: must be positive"},
		{"negative tpot", []Tier{{Name: "a", TTFT: time.Second, TPOT: -time.Millisecond}}, "tpot_ms: must be positive"},
		{"background with ttft", []Tier{{Name: "bg", Background: true, TTFT: time.Second}}, "background tier has no"},
		{"duplicate", []Tier{{Name: "a", Background: true}, {Name: "a", Background: true}}, "already the name"},
	} {
		if _, err := New(c.tiers); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestResolve(t *testing.T) {
	s, err := New([]Tier{
		{Name: "strict", TTFT: time.Second, TPOT: time.Millisecond},
		{Name: "loose", TTFT: time.Second, TPOT: 2 * time.Millisecond, Default: true},
		{Name: "batch", Background: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want int
	}{{"strict", 0}, {"loose", 1}, {"batch", 2}, {"", 1}} {
		got, err := s.Resolve(c.name)
		if err != nil || got != c.want {
			t.Errorf("Resolve(%q) = %d, %v; want %d", c.name, got, err, c.want)
		}
	}
	for _, name := range []string{"Strict", "gold", " strict"} {
		_, err := s.Resolve(name)
		if !errors.Is(err, ErrUnknownTier) || !strings.Contains(err.Error(), "strict, loose, batch") {
			t.Errorf("Resolve(%q): %v, want ErrUnknownTier listing the tiers", name, err)
		}
	}
}

func TestSetIsACopy(t *testing.T) {
	in := []Tier{{Name: "a", TTFT: time.Second, TPOT: time.Millisecond}}
	s, err := New(in)
	if err != nil {
		t.Fatal(err)
	}
	in[0].Name = "changed"
	out := s.Tiers()
	out[0].TTFT = 0
	if got := s.At(0); got.Name != "a" || got.TTFT != time.Second {
		t.Fatalf("set changed through its input or output: %+v", got)
	}
}

func BenchmarkResolve(b *testing.B) {
	s, err := Load("../examples/slo-tiers/qwen-14b-h100-three-tiers.json")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Resolve("relaxed"); err != nil {
			b.Fatal(err)
		}
	}
}
