package tokenizer

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

func TestVocabAndMergesJSON(t *testing.T) {
	vocab := `{ "a" : 0, "\"q\"": 1, "back\\slash": 2, "\u0120x": 3, "\ud83d\ude00": 4, "é": 5, "tab\t": 6, "a\"q\"": 7, "\u00e9": 8 }`
	var got vocabJSON
	if err := json.Unmarshal([]byte(vocab), &got); err != nil {
		t.Fatal(err)
	}
	var want map[string]int
	if err := json.Unmarshal([]byte(vocab), &want); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.m, want) {
		t.Errorf("vocab = %v, want %v", got.m, want)
	}
	for _, merges := range []string{
		`["a \"q\"", "\u0120x \ud83d\ude00"]`,
		`[ ["a", "\"q\""] , ["Ġx","😀"] ]`,
	} {
		var m mergesJSON
		if err := json.Unmarshal([]byte(merges), &m); err != nil {
			t.Fatalf("%s: %v", merges, err)
		}
		if want := [][2]string{{"a", `"q"`}, {"Ġx", "😀"}}; !slices.Equal(m.pairs, want) {
			t.Errorf("%s: %q, want %q", merges, m.pairs, want)
		}
	}
	for _, bad := range []string{`{"a": 1.5}`, `{"a": "1"}`, `{"a" 1}`} {
		var v vocabJSON
		if err := json.Unmarshal([]byte(`{"v":`+bad+`}`), &struct {
			V *vocabJSON `json:"v"`
		}{&v}); err == nil {
			t.Errorf("vocab %s: no error", bad)
		}
	}
	var v vocabJSON
	if err := json.Unmarshal([]byte(`[["a", 0.5]]`), &v); err != nil || !v.notObject {
		t.Errorf("list vocab: err %v notObject %v", err, v.notObject)
	}
}
