package forward

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// trace records the ops the program calls.
type trace struct {
	ops    []string
	repeat int
	fail   string // an op name whose call fails
}

func (t *trace) rec(op string) error {
	if t.repeat > 1 {
		op += fmt.Sprintf("×%d", t.repeat)
	}
	t.ops = append(t.ops, op)
	if t.fail != "" && strings.HasPrefix(op, t.fail) {
		return errors.New("fail " + op)
	}
	return nil
}

func (t *trace) Embed()                                    { t.rec("embed") }
func (t *trace) BeginLayer(_ context.Context, l int) error { return t.rec(fmt.Sprint("L", l)) }
func (t *trace) AttnNorm(int)                              { t.rec("norm") }
func (t *trace) MLPNorm(int)                               { t.rec("norm2") }
func (t *trace) QKV(int)                                   { t.rec("qkv") }
func (t *trace) Position(int)                              { t.rec("rope") }
func (t *trace) PackHeads()                                { t.rec("pack") }
func (t *trace) UnpackHeads()                              { t.rec("unpack") }
func (t *trace) CacheWrite(int)                            { t.rec("cache") }
func (t *trace) Attention(int)                             { t.rec("attn") }
func (t *trace) OutProj(int)                               { t.rec("o") }
func (t *trace) MLPUp(int)                                 { t.rec("up") }
func (t *trace) MLPDown(int)                               { t.rec("down") }
func (t *trace) Residual(_ int, b Branch)                  { t.rec(fmt.Sprint("res", b)) }
func (t *trace) Logits()                                   { t.rec("logits") }
func (t *trace) ReduceTP(_ context.Context, b Branch) error {
	return t.rec(fmt.Sprint("AR", b))
}
func (t *trace) ExchangeHeads(_ context.Context, back bool) error {
	if back {
		return t.rec("A2A-back")
	}
	return t.rec("A2A")
}
func (t *trace) RecvResidual(context.Context) error { return t.rec("recv") }
func (t *trace) SendResidual(context.Context) error { return t.rec("send") }
func (t *trace) GatherLogits(context.Context) error { return t.rec("AG") }

type uniformTrace struct{ trace }

func (u *uniformTrace) Repeat(n int) { u.repeat = n }

func TestRunOrder(t *testing.T) {
	const layer = "norm qkv rope cache attn o res1 norm2 up down res2"
	const tpLayer = "norm qkv rope cache attn o AR1 res1 norm2 up down AR2 res2"
	const spLayer = "norm qkv rope pack A2A cache attn A2A-back unpack o res1 norm2 up down res2"
	for _, c := range []struct {
		name  string
		shape Shape
		want  string
	}{
		{"single", Shape{First: true, Last: true, LayerLo: 0, LayerHi: 2, TP: 1, SP: 1}, "embed L0 " + layer + " L1 " + layer + " logits"},
		{"tp", Shape{First: true, Last: true, LayerLo: 0, LayerHi: 1, TP: 2, SP: 1}, "embed AR0 L0 " + tpLayer + " logits AG"},
		{"sp", Shape{First: true, Last: true, LayerLo: 0, LayerHi: 1, TP: 1, SP: 2}, "embed L0 " + spLayer + " logits"},
		{"middle stage", Shape{LayerLo: 3, LayerHi: 4, TP: 1, SP: 1}, "recv L3 " + layer + " send"},
	} {
		var tr trace
		if err := Run(context.Background(), &tr, c.shape); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(tr.ops, " "); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// TestRunUniform: a pricing backend runs one layer standing for the
// stage's, and the ops outside the layers count once.
func TestRunUniform(t *testing.T) {
	var u uniformTrace
	if err := Run(context.Background(), &u, Shape{First: true, Last: true, LayerLo: 2, LayerHi: 5, TP: 2, SP: 1}); err != nil {
		t.Fatal(err)
	}
	want := "embed AR0 L2×3 norm×3 qkv×3 rope×3 cache×3 attn×3 o×3 AR1×3 res1×3 norm2×3 up×3 down×3 AR2×3 res2×3 logits AG"
	if got := strings.Join(u.ops, " "); got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}

// TestRunStopsOnError: a failed collective or layer check ends the
// program at once.
func TestRunStopsOnError(t *testing.T) {
	for _, fail := range []string{"AR1", "A2A", "L1", "recv"} {
		tr := trace{fail: fail}
		err := Run(context.Background(), &tr, Shape{First: fail != "recv", Last: true, LayerLo: 0, LayerHi: 2, TP: 2, SP: 2})
		if err == nil || !strings.HasPrefix(tr.ops[len(tr.ops)-1], fail) {
			t.Errorf("fail at %s: err %v, last op %s", fail, err, tr.ops[len(tr.ops)-1])
		}
	}
}
