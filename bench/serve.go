package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gearboxlm/gearbox/model/builtin"
	"github.com/gearboxlm/gearbox/tokenizer"
)

// ServeConfig is what `gearbox bench serve` runs: Run's options plus where
// the workload, model name and tokenizer come from and where the result
// goes. Options.Requests, Prompts, Model, DatasetSpec and TokenizerID are
// filled by Serve.
type ServeConfig struct {
	Options
	Dataset      string // dataset spec for LoadDataset
	MaxRequests  int    // use the first N requests; 0: all. For synthetic datasets, the number of requests (vLLM's --num-prompts)
	TokenizerDir string // a directory with tokenizer.json; "": ask the server (see ResolveTokenizer)
	ResultJSON   string // write the report's JSON here when set
	SaveResult   bool   // also write it to vLLM's default file name (DefaultResultName) in the current directory
}

// Serve runs a benchmark end to end: loads the dataset, finds the model
// name (the server's first model when none is given) and tokenizer, runs
// the workload, prints vLLM's result table on stdout (settings and
// failures go to stderr), and writes the JSON report where asked. On
// cancellation it still prints and writes the report of the requests that
// ended, and returns ctx's error with it.
func Serve(ctx context.Context, cfg ServeConfig, stdout, stderr io.Writer) (*Report, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("bench: no base URL")
	}
	if cfg.Replay && cfg.RequestRate > 0 && !math.IsInf(cfg.RequestRate, 1) {
		return nil, errors.New("bench: choose a request rate or replaying the trace's timestamps, not both")
	}
	ds, err := cfg.workload()
	if err != nil {
		return nil, err
	}
	tok, err := cfg.resolveModel(ctx)
	if err != nil {
		return nil, err
	}
	pb, err := NewPromptBuilder(tok, cfg.Seed)
	if err != nil {
		return nil, err
	}
	cfg.Requests, cfg.Prompts, cfg.DatasetSpec = ds.Requests, pb, ds.Spec
	cfg.printSettings(stderr)

	rep, runErr := Run(ctx, cfg.Options)
	if rep == nil {
		return nil, runErr
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "Interrupted: the report covers the %d requests that ended.\n", len(rep.Requests))
	}
	printFailures(stderr, rep, 10)
	if err := rep.WriteTable(stdout); err != nil {
		return rep, err
	}
	if err := cfg.save(rep, stderr); err != nil {
		return rep, err
	}
	return rep, runErr
}

// workload loads the dataset and cuts it to MaxRequests, which for a
// synthetic dataset is its number of requests, as vLLM's --num-prompts.
func (cfg *ServeConfig) workload() (*Dataset, error) {
	ds, err := LoadDataset(cfg.Dataset, cfg.Seed)
	if err != nil {
		return nil, err
	}
	if cfg.Replay && !ds.Timed {
		return nil, fmt.Errorf("bench: dataset %s has no timestamps to replay", cfg.Dataset)
	}
	if synth, ok := strings.CutPrefix(cfg.Dataset, "synthetic"); ok && cfg.MaxRequests > 0 {
		spec, _ := ParseSynthetic(strings.TrimPrefix(synth, ":")) // LoadDataset parsed it already
		spec.N = cfg.MaxRequests
		ds.Requests = Synthetic(spec, cfg.Seed)
	}
	return ds.Head(cfg.MaxRequests), nil
}

// resolveModel sets Model (the server's first when none is given) and
// TokenizerID, and returns the tokenizer.
func (cfg *ServeConfig) resolveModel(ctx context.Context) (*tokenizer.Tokenizer, error) {
	var (
		models  []ServerModel
		listErr error
	)
	if cfg.Model == "" || cfg.TokenizerDir == "" {
		models, listErr = ListModels(ctx, &http.Client{Timeout: 30 * time.Second}, cfg.BaseURL, cfg.APIKey)
		if listErr != nil && cfg.Model == "" {
			return nil, fmt.Errorf("bench: no --model given and %w", listErr)
		}
	}
	if cfg.Model == "" {
		if len(models) == 0 {
			return nil, fmt.Errorf("bench: no --model given and %s/v1/models lists none", cfg.BaseURL)
		}
		cfg.Model = models[0].ID
	}
	tok, id, err := ResolveTokenizer(cfg.TokenizerDir, cfg.Model, models)
	if err != nil {
		if listErr != nil {
			err = fmt.Errorf("%w (%v)", err, listErr)
		}
		return nil, err
	}
	cfg.TokenizerID = id
	return tok, nil
}

// printSettings says what is about to run, as vLLM does before its runs.
func (cfg *ServeConfig) printSettings(w io.Writer) {
	in, out := 0, 0
	for _, r := range cfg.Requests {
		in += r.InputTokens
		out += r.OutputTokens
	}
	n := float64(len(cfg.Requests))
	fmt.Fprintf(w, "Dataset: %s, %d requests, %.1f input and %.1f output tokens on average\n", cfg.DatasetSpec, len(cfg.Requests), float64(in)/n, float64(out)/n)
	fmt.Fprintf(w, "Model: %s at %s%s, tokenizer: %s\n", cfg.Model, strings.TrimSuffix(cfg.BaseURL, "/"), cfg.endpoint(), cfg.TokenizerID)
	if cfg.Replay {
		fmt.Fprintf(w, "Replaying the trace's timestamps, time scale %v\n", cfg.timeScale())
	} else {
		b := cfg.Burstiness
		if b == 0 {
			b = 1
		}
		dist := "Gamma distribution"
		if b == 1 {
			dist = "Poisson process"
		}
		fmt.Fprintf(w, "Traffic request rate: %s\nBurstiness factor: %s (%s)\n", pyFloat(rateOrInf(cfg.RequestRate)), pyFloat(b), dist)
	}
	mc := "None"
	if cfg.MaxConcurrency > 0 {
		mc = strconv.Itoa(cfg.MaxConcurrency)
	}
	fmt.Fprintf(w, "Maximum request concurrency: %s\n", mc)
}

// printFailures prints the errors of the first limit failed requests.
func printFailures(w io.Writer, rep *Report, limit int) {
	printed := 0
	for _, r := range rep.Requests {
		if r.OK() || printed == limit {
			continue
		}
		if printed == 0 {
			fmt.Fprintf(w, "Failed requests (first %d):\n", limit)
		}
		fmt.Fprintf(w, "  request %d: %s\n", r.Index, r.Error)
		printed++
	}
}

// save writes the report's JSON to ResultJSON and, with SaveResult, to
// vLLM's default name.
func (cfg *ServeConfig) save(rep *Report, log io.Writer) error {
	var names []string
	if cfg.ResultJSON != "" {
		names = append(names, cfg.ResultJSON)
	}
	if cfg.SaveResult {
		names = append(names, DefaultResultName(&rep.RunInfo))
	}
	for _, name := range names {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		if err := os.WriteFile(name, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(log, "Saved the result to %s\n", name)
	}
	return nil
}

func (cfg *ServeConfig) endpoint() string {
	if cfg.Endpoint == "" {
		return EndpointCompletions
	}
	return cfg.Endpoint
}

func (cfg *ServeConfig) timeScale() float64 {
	if cfg.TimeScale == 0 {
		return 1
	}
	return cfg.TimeScale
}

func rateOrInf(r float64) float64 {
	if r <= 0 {
		return math.Inf(1)
	}
	return r
}

// DefaultResultName is vllm bench serve's --save-result file name,
// "{label or backend}-{rate}qps[-concurrency{C}]-{model}-{date}.json" with
// the model's last path element; a replay writes "replay{scale}x" for the
// rate.
func DefaultResultName(info *RunInfo) string {
	label := info.Label
	if label == "" {
		label = info.Backend
	}
	rate := pyFloat(rateOrInf(info.RequestRate)) + "qps"
	if info.Replay {
		rate = "replay" + pyFloat(info.TimeScale) + "x"
	}
	conc := ""
	if info.MaxConcurrency > 0 {
		conc = fmt.Sprintf("-concurrency%d", info.MaxConcurrency)
	}
	model := info.ModelID[strings.LastIndex(info.ModelID, "/")+1:]
	return fmt.Sprintf("%s-%s%s-%s-%s.json", label, rate, conc, model, info.Date)
}

// pyFloat formats x as Python's str(float) does: "inf", "10.0", "2.5".
func pyFloat(x float64) string {
	if math.IsInf(x, 1) {
		return "inf"
	}
	s := strconv.FormatFloat(x, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// ServerModel is an entry of an OpenAI-compatible server's GET /v1/models.
// Root is vLLM's (and Gearbox's) path of the model the name serves.
type ServerModel struct {
	ID   string `json:"id"`
	Root string `json:"root"`
}

// ListModels returns the models the server at baseURL lists.
func ListModels(ctx context.Context, c *http.Client, baseURL, apiKey string) ([]ServerModel, error) {
	url := strings.TrimSuffix(baseURL, "/") + "/v1/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("listing models: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := errorBody(resp.Body)
		return nil, fmt.Errorf("listing models: GET %s: %s: %s", url, resp.Status, msg)
	}
	var list struct {
		Data []ServerModel `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("listing models: GET %s: %w", url, err)
	}
	return list.Data, nil
}

// ResolveTokenizer finds the tokenizer prompts are measured with: dir when
// given; else the model's Root in models when that is a local directory
// holding tokenizer.json; else the built-in one when model is the built-in
// stories260K. It returns the tokenizer and where it came from.
func ResolveTokenizer(dir, model string, models []ServerModel) (*tokenizer.Tokenizer, string, error) {
	if dir != "" {
		tok, err := tokenizer.Load(dir)
		return tok, dir, err
	}
	for _, m := range models {
		if m.ID != model || m.Root == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(m.Root, "tokenizer.json")); err == nil {
			tok, err := tokenizer.Load(m.Root)
			return tok, m.Root, err
		}
	}
	if model == builtin.Name {
		tj, err := fs.ReadFile(builtin.FS(), "tokenizer.json")
		if err != nil {
			return nil, "", err
		}
		tc, err := fs.ReadFile(builtin.FS(), "tokenizer_config.json")
		if err != nil {
			return nil, "", err
		}
		tok, err := tokenizer.New(tj, tc)
		return tok, "builtin:" + builtin.Name, err
	}
	return nil, "", fmt.Errorf("bench: no tokenizer for model %q: the server does not report a local model directory with tokenizer.json; pass --tokenizer DIR (a Hugging Face model directory)", model)
}
