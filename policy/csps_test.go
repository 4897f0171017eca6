package policy

import (
	"math"
	"testing"
	"time"

	"github.com/gearboxlm/gearbox/parallel"
)

// TestCSPSArchitecture holds the chooser to App A's inequality evaluated
// exactly (T10): at N = 2 SP-TP always wins (the paper's sentence says
// the opposite, G10); the thresholds 2dN/(N−2) for d = 4096 are G11's
// 24.6K (N=3), 16.4K (N=4), 10.9K (N=8); the inequality agrees with the
// element counts it is derived from; without TP it is always SP-NTP.
func TestCSPSArchitecture(t *testing.T) {
	const d = 4096
	p := parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 8, TP: 1})
	for _, tc := range []struct{ n, atOrBelow int }{{3, 24576}, {4, 16384}, {8, 10922}} {
		if NTPCheaper(tc.atOrBelow, d, tc.n) || !NTPCheaper(tc.atOrBelow+1, d, tc.n) {
			t.Fatalf("N=%d: SP-NTP should win from %d tokens on", tc.n, tc.atOrBelow+1)
		}
	}
	for _, l := range []int{1 << 10, 1 << 16, 1 << 20, 1 << 24} {
		if NTPCheaper(l, d, 2) {
			t.Fatalf("N=2, L=%d: SP-NTP chosen; App A's inequality gives SP-TP at N=2", l)
		}
	}
	for n := 2; n <= 8; n++ {
		for l := 1000; l < 100000; l += 997 {
			ntp, tp := ArchElems(l, d, n, true)
			if NTPCheaper(l, d, n) != (ntp < tp) {
				t.Fatalf("N=%d L=%d: inequality %v, element counts %.0f vs %.0f", n, l, NTPCheaper(l, d, n), ntp, tp)
			}
		}
	}
	tpDeploy, err := NewCSPS(p, 16384, d, 8)
	if err != nil {
		t.Fatal(err)
	}
	cpu, err := NewCSPS(p, 16384, d, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		l      int
		degree int
		tp     Arch // on the TP deployment
	}{
		{100, 1, Local}, {16384, 1, Local}, {16385, 2, SPTP}, {32768, 2, SPTP}, {40000, 3, SPNTP}, {49153, 4, SPNTP}, {1 << 20, 8, SPNTP},
	} {
		got := tpDeploy.Configure(tc.l)
		if got.Degree != tc.degree || got.Arch != tc.tp {
			t.Fatalf("TP deployment, L=%d: %+v, want degree %d %s", tc.l, got, tc.degree, tc.tp)
		}
		want := SPNTP
		if tc.degree == 1 {
			want = Local
		}
		if c := cpu.Configure(tc.l); c.Degree != tc.degree || c.Arch != want {
			t.Fatalf("no TP, L=%d: %+v, want degree %d %s", tc.l, c, tc.degree, want)
		}
		// --csps-arch: forced for prompts over several ranks, on either
		// deployment; a prompt on one rank stays Local.
		for _, force := range []Arch{SPNTP, SPTP} {
			for _, dep := range []*CSPS{cpu, tpDeploy} {
				dep.ForceArch = force
				c := dep.Configure(tc.l)
				dep.ForceArch = Local
				if want := force; c.Degree != tc.degree || (tc.degree > 1 && c.Arch != want) || (tc.degree == 1 && c.Arch != Local) {
					t.Fatalf("TP %d forced %s, L=%d: %+v", dep.TP, force, tc.l, c)
				}
			}
		}
	}
	cpu.CSALevels, cpu.CSADrop = 3, 0.2
	if c := cpu.Configure(100); c.CSALevels != 1 {
		t.Fatalf("a prompt on one rank gets CSA %+v; it has no levels to sparsify", c)
	}
	if c := cpu.Configure(1 << 20); c.CSALevels != 3 || c.CSADrop != 0.2 {
		t.Fatalf("a prompt over 8 ranks gets %+v, want 3 levels at drop 0.2", c)
	}
	if d := cpu.Decide(State{}); d.Placement.Name != p.Name || cpu.Place(d, Batch{Tokens: 9999}).Name != p.Name {
		t.Fatal("csps must keep its one placement")
	}
}

// TestCSPSObjective: with a TTFT objective the drop ratio is the least on
// R43's grid that meets it (none when dense attention does, 0.9 when
// nothing does), per request by length; prompts on one rank get none.
func TestCSPSObjective(t *testing.T) {
	p := parallel.Standard(parallel.Plan{DP: 1, PP: 1, SP: 4, TP: 1})
	c, err := NewCSPS(p, 1000, 4096, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.CSALevels, c.CSADrop = 3, 0.1
	// A made-up model: 1 ms per token dense, CSA saving half its drop.
	model := func(l int, cfg CSPSConfig) time.Duration {
		base := float64(l) * float64(time.Millisecond)
		if cfg.CSALevels > 1 {
			base *= 1 - cfg.CSADrop/2
		}
		return time.Duration(base)
	}
	c.Objective = CSPSObjective{TTFT: 3 * time.Second, Prefill: model}
	for _, tc := range []struct {
		l      int
		levels int
		drop   float64
	}{
		{800, 1, 0},     // one rank
		{2500, 1, 0},    // dense meets 3 s
		{3200, 3, 0.14}, // 3.2 s·(1 − p/2) ≤ 3 s from p = 0.125: 0.14 on the grid
		{4000, 3, 0.5},  // 4 s·(1 − p/2) ≤ 3 s from p = 0.5
		{9000, 3, 0.9},  // nothing meets it: the most
	} {
		got := c.Configure(tc.l)
		if got.CSALevels != tc.levels || math.Abs(got.CSADrop-tc.drop) > 1e-9 {
			t.Fatalf("L=%d: %+v, want %d levels at drop %g", tc.l, got, tc.levels, tc.drop)
		}
	}
	c.Objective = CSPSObjective{}
	if got := c.Configure(4000); got.CSALevels != 3 || got.CSADrop != 0.1 {
		t.Fatalf("without an objective: %+v, want the fixed 0.1", got)
	}
}
