package bench

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReadAzure(t *testing.T) {
	const trace = "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:17:03.9799600,4808,10\n" +
		"2023-11-16 18:17:04.4799600,3180,8\n" +
		"2023-11-16 18:17:05.2299600,110,27" // no final newline, as published
	reqs, err := ReadAzure(strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{Index: 0, Arrival: 0, InputTokens: 4808, OutputTokens: 10},
		{Index: 1, Arrival: 500 * time.Millisecond, InputTokens: 3180, OutputTokens: 8},
		{Index: 2, Arrival: 1250 * time.Millisecond, InputTokens: 110, OutputTokens: 27},
	}
	if !reflect.DeepEqual(reqs, want) {
		t.Fatalf("got %+v\nwant %+v", reqs, want)
	}

	// Other column orders and out-of-order rows.
	reqs, err = ReadAzure(strings.NewReader("GeneratedTokens,TIMESTAMP,ContextTokens\n5,2023-11-16 18:17:05,7\n6,2023-11-16 18:17:04,9\n"))
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].InputTokens != 9 || reqs[0].Arrival != 0 || reqs[1].Arrival != time.Second || reqs[1].OutputTokens != 5 {
		t.Fatalf("got %+v", reqs)
	}
}

func TestReadAzureMalformed(t *testing.T) {
	const header = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	const good = "2023-11-16 18:17:03.9799600,4808,10\n"
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "header"},
		{"no rows", header, "no rows"},
		{"missing column", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03,5\n", "line 1: no generatedtokens column"},
		{"bad time", header + good + "16/11/2023 18:17,5,5\n", "line 3: TIMESTAMP"},
		{"bad number", header + good + "2023-11-16 18:17:04,abc,5\n", "line 3: ContextTokens"},
		{"zero output", header + good + good + "2023-11-16 18:17:04,5,0\n", "line 4: GeneratedTokens"},
		{"short row", header + good + "2023-11-16 18:17:04,5\n", "line 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadAzure(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestReadMooncake(t *testing.T) {
	const trace = `{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}
{"timestamp": 3052, "input_length": 600, "output_length": 1, "hash_ids": [0, 46]}

{"timestamp": 3052.5, "input_length": 512, "output_length": 9, "hash_ids": [0], "extra": true}
`
	reqs, err := ReadMooncake(strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{Index: 0, Arrival: 0, InputTokens: 6955, OutputTokens: 52, HashIDs: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}},
		{Index: 1, Arrival: 3052 * time.Millisecond, InputTokens: 600, OutputTokens: 1, HashIDs: []int{0, 46}},
		{Index: 2, Arrival: 3052500 * time.Microsecond, InputTokens: 512, OutputTokens: 9, HashIDs: []int{0}},
	}
	if !reflect.DeepEqual(reqs, want) {
		t.Fatalf("got %+v\nwant %+v", reqs, want)
	}
}

func TestReadMooncakeMalformed(t *testing.T) {
	const good = `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}` + "\n"
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "no rows"},
		{"bad json", good + "{\"timestamp\": 1,\n", "line 2"},
		{"missing field", good + `{"timestamp": 1, "input_length": 5}` + "\n", "line 2: want timestamp"},
		{"hash count", good + good + `{"timestamp": 1, "input_length": 1025, "output_length": 5, "hash_ids": [1, 2]}`, "line 3: 2 hash_ids for input_length 1025, want 3"},
		{"zero input", `{"timestamp": 1, "input_length": 0, "output_length": 5}`, "line 1"},
		{"negative time", `{"timestamp": -1, "input_length": 3, "output_length": 5}`, "line 1: negative timestamp"},
		{"wrong type", `{"timestamp": "now", "input_length": 3, "output_length": 5}`, "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadMooncake(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestSynthetic(t *testing.T) {
	spec, err := ParseSynthetic("")
	if err != nil || spec != (SyntheticSpec{N: 1000, InMin: 1024, InMax: 1024, OutMin: 128, OutMax: 128}) {
		t.Fatalf("defaults %+v, %v", spec, err)
	}
	spec, err = ParseSynthetic("in=4096,out=250,n=3")
	if err != nil {
		t.Fatal(err)
	}
	reqs := Synthetic(spec, 0)
	if len(reqs) != 3 || !reflect.DeepEqual(reqs[2], Request{Index: 2, InputTokens: 4096, OutputTokens: 250}) {
		t.Fatalf("%+v", reqs)
	}
	spec, err = ParseSynthetic("in=100-200,out=10-12,n=500")
	if err != nil {
		t.Fatal(err)
	}
	a, b := Synthetic(spec, 7), Synthetic(spec, 7)
	seen := map[int]bool{}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			t.Fatal("same seed, different lengths")
		}
		if a[i].InputTokens < 100 || a[i].InputTokens > 200 || a[i].OutputTokens < 10 || a[i].OutputTokens > 12 {
			t.Fatalf("out of range: %+v", a[i])
		}
		seen[a[i].OutputTokens] = true
	}
	if len(seen) != 3 {
		t.Fatalf("output lengths seen %v, want 10, 11 and 12", seen)
	}
	for _, bad := range []string{"in", "in=0", "in=5-3", "out=x", "n=1-2", "len=5"} {
		if _, err := ParseSynthetic(bad); err == nil {
			t.Errorf("ParseSynthetic(%q) succeeded", bad)
		}
	}
}

func TestLoadDataset(t *testing.T) {
	dir := t.TempDir()
	azure := filepath.Join(dir, "a.csv")
	mooncake := filepath.Join(dir, "m.jsonl")
	os.WriteFile(azure, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.9799600,8,1\n"), 0o644)
	os.WriteFile(mooncake, []byte(`{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [3]}`+"\n"), 0o644)

	for _, tc := range []struct {
		spec  string
		n     int
		timed bool
	}{{"azure:" + azure, 2, true}, {"mooncake:" + mooncake, 1, true}, {"synthetic:n=4", 4, false}, {"synthetic", 1000, false}} {
		ds, err := LoadDataset(tc.spec, 1)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		if len(ds.Requests) != tc.n || ds.Timed != tc.timed || ds.Spec != tc.spec {
			t.Fatalf("%s: %d requests, timed %v", tc.spec, len(ds.Requests), ds.Timed)
		}
	}
	ds, _ := LoadDataset("synthetic:n=10", 1)
	if got := ds.Head(3); len(got.Requests) != 3 || len(ds.Requests) != 10 {
		t.Fatal("Head")
	}
	if got := ds.Head(0); len(got.Requests) != 10 {
		t.Fatal("Head(0)")
	}
	for _, bad := range []string{"azure", "azure:", "sharegpt:x.json", "mooncake:" + filepath.Join(dir, "missing.jsonl"), "azure:" + mooncake} {
		if _, err := LoadDataset(bad, 1); err == nil {
			t.Errorf("LoadDataset(%q) succeeded", bad)
		}
	}
}
