package sim

import (
	"math"
	"strings"
	"testing"

	"github.com/gearboxlm/gearbox/parallel"
)

// TestSpeculativeRun simulates n-gram speculative decoding at acceptance
// rates 0, 0.6 and (nearly) 1: the steps a request takes, the share of
// drafts kept against the geometric model's α(1−α^k)/(1−α)/k, and the
// decode time a token against plain decoding's.
func TestSpeculativeRun(t *testing.T) {
	_, opts := llama70B(t)
	opts.Plan = parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}
	run := func(n int, spec Speculation) *RunResult {
		t.Helper()
		o := opts
		o.Requests = synthetic(n, 1024, 250, math.Inf(1), 1)
		o.Speculative = spec
		res, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if res.Report.Completed != n || res.Report.TotalOutputTokens != 250*n {
			t.Fatalf("%+v: completed %d, %d output tokens", spec, res.Report.Completed, res.Report.TotalOutputTokens)
		}
		return res
	}
	plain := run(1, Speculation{})
	none := run(1, Speculation{Tokens: 3, Acceptance: 0})
	all := run(1, Speculation{Tokens: 3, Acceptance: 0.999999})
	if plain.Steps != 1+249 || none.Steps != plain.Steps || none.AcceptedTokens != 0 || none.DraftTokens < 3*240 {
		t.Fatalf("acceptance 0: %d steps (plain %d), %d of %d drafts kept", none.Steps, plain.Steps, none.AcceptedTokens, none.DraftTokens)
	}
	// The prompt's step gives the first token, then 4 a step: 249 = 62·4 + 1,
	// the last alone.
	if all.Steps != 1+62+1 || all.AcceptedTokens != all.DraftTokens {
		t.Fatalf("acceptance 1: %d steps, %d of %d drafts kept", all.Steps, all.AcceptedTokens, all.DraftTokens)
	}
	if !(none.Report.TPOT.Mean > plain.Report.TPOT.Mean && all.Report.TPOT.Mean < plain.Report.TPOT.Mean/3) {
		t.Fatalf("TPOT: plain %.3f ms, drafts never kept %.3f, always kept %.3f", plain.Report.TPOT.Mean, none.Report.TPOT.Mean, all.Report.TPOT.Mean)
	}
	const a, k = 0.6, 3
	some := run(16, Speculation{Tokens: k, Acceptance: a})
	want := a * (1 - math.Pow(a, k)) / (1 - a) / k
	if got := float64(some.AcceptedTokens) / float64(some.DraftTokens); math.Abs(got-want) > 0.03 {
		t.Fatalf("acceptance %.2f: %.3f of drafts kept, the geometric model %.3f", a, got, want)
	}
	if _, err := Run(RunOptions{Model: opts.Model, Cost: opts.Cost, Speculative: Speculation{Tokens: 3, Acceptance: 1}}); err == nil {
		t.Fatal("acceptance 1 accepted")
	}
	t.Logf("TPOT: plain %.2f ms, k=3 at 0 %.2f ms, at 0.6 %.2f ms (16 requests), at 1 %.2f ms", plain.Report.TPOT.Mean, none.Report.TPOT.Mean, some.Report.TPOT.Mean, all.Report.TPOT.Mean)
}

// TestDraftModelRun simulates draft-model speculative decoding (Llama
// 3.2 1B drafting for Llama 3.3 70B on 8×H200 under TP8): the draft model
// runs k steps for each target step that proposes (its catch-up and one a
// draft after), its time is spent between the target's steps (a token
// costs more than with n-gram drafts at either acceptance, and still
// less than plain decoding when drafts are always kept), and its
// weights and KV cache take memory from the target's pool. A draft with
// another vocabulary is refused.
func TestDraftModelRun(t *testing.T) {
	_, opts := llama70B(t)
	opts.Plan = parallel.Plan{DP: 1, PP: 1, SP: 1, TP: 8}
	draft, err := LookupModel("meta-llama/Llama-3.2-1B-Instruct")
	if err != nil {
		t.Fatal(err)
	}
	run := func(spec Speculation) *RunResult {
		t.Helper()
		o := opts
		o.Requests = synthetic(1, 1024, 250, math.Inf(1), 1)
		o.Speculative = spec
		res, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if res.Report.Completed != 1 || res.Report.TotalOutputTokens != 250 {
			t.Fatalf("%+v: completed %d, %d output tokens", spec, res.Report.Completed, res.Report.TotalOutputTokens)
		}
		return res
	}
	plain := run(Speculation{})
	ngramNone, ngramAll := run(Speculation{Tokens: 3}), run(Speculation{Tokens: 3, Acceptance: 0.999999})
	none, all := run(Speculation{Tokens: 3, Draft: draft}), run(Speculation{Tokens: 3, Acceptance: 0.999999, Draft: draft})
	for _, c := range []struct {
		name         string
		draft, ngram *RunResult
	}{{"acceptance 0", none, ngramNone}, {"acceptance 1", all, ngramAll}} {
		d := c.draft
		// One request: each proposal of k drafts takes k draft steps.
		if d.Steps != c.ngram.Steps || d.DraftTokens != c.ngram.DraftTokens || d.DraftSteps != int(d.DraftTokens) || !(d.DraftSeconds > 0) {
			t.Errorf("%s: %d steps (n-gram %d), %d draft tokens (%d), %d draft steps in %.3f s", c.name, d.Steps, c.ngram.Steps,
				d.DraftTokens, c.ngram.DraftTokens, d.DraftSteps, d.DraftSeconds)
		}
		if !(d.Report.TPOT.Mean > c.ngram.Report.TPOT.Mean) || plain.DraftSteps != 0 || c.ngram.DraftSteps != 0 {
			t.Errorf("%s: TPOT %.3f ms with a draft model, %.3f with n-grams", c.name, d.Report.TPOT.Mean, c.ngram.Report.TPOT.Mean)
		}
		if d.KVTokens >= plain.KVTokens {
			t.Errorf("%s: %d KV tokens beside a draft model, %d alone", c.name, d.KVTokens, plain.KVTokens)
		}
	}
	if !(all.Report.TPOT.Mean < plain.Report.TPOT.Mean && none.Report.TPOT.Mean > plain.Report.TPOT.Mean) {
		t.Errorf("TPOT: plain %.3f ms, a draft model never kept %.3f, always kept %.3f", plain.Report.TPOT.Mean, none.Report.TPOT.Mean, all.Report.TPOT.Mean)
	}
	t.Logf("TPOT: plain %.2f ms; k=3 n-gram at 0 %.2f, at 1 %.2f; draft model at 0 %.2f, at 1 %.2f (%.2f ms a draft step); KV %d → %d tokens",
		plain.Report.TPOT.Mean, ngramNone.Report.TPOT.Mean, ngramAll.Report.TPOT.Mean, none.Report.TPOT.Mean, all.Report.TPOT.Mean,
		1e3*all.DraftSeconds/float64(all.DraftSteps), plain.KVTokens, all.KVTokens)

	other, err := LookupModel("meta-llama/Llama-2-7b-hf")
	if err != nil {
		t.Fatal(err)
	}
	o := opts
	o.Requests = synthetic(1, 128, 16, math.Inf(1), 1)
	o.Speculative = Speculation{Tokens: 3, Acceptance: 0.5, Draft: other}
	if _, err := Run(o); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("a draft of another vocabulary: %v", err)
	}
}
