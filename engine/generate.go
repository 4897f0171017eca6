package engine

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/gearboxlm/gearbox/sample"
)

// Output is a finished generation collected from a stream.
type Output struct {
	Tokens       []int           // completion token ids (a final stop token included)
	Text         string          // completion text (stop strings and special tokens excluded)
	Logprobs     []sample.Result // one per completion token when Sampling.Logprobs >= 0
	FinishReason string
	Usage        Usage
	PrefillTime  time.Duration // from submission to the first token
	DecodeTime   time.Duration // from the first token to the last
}

// Generate submits req, waits for it to end and returns its output; onText,
// if not nil, receives the completion text as it becomes final. Cancelling
// ctx aborts the request. The engine loop (Run) must be running.
func (e *Engine) Generate(ctx context.Context, req Request, onText func(string)) (*Output, error) {
	st, err := e.Submit(req)
	if err != nil {
		return nil, err
	}
	start := e.clk.Now()
	var first time.Time
	out := &Output{}
	for {
		ev, err := st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			e.Abort(st.ID())
			return nil, err
		}
		if len(ev.Tokens) > 0 && first.IsZero() {
			first = e.clk.Now()
			out.PrefillTime = first.Sub(start)
		}
		out.Tokens = append(out.Tokens, ev.Tokens...)
		out.Logprobs = append(out.Logprobs, ev.Logprobs...)
		out.Text += ev.Text
		out.Usage = ev.Usage
		if ev.Text != "" && onText != nil {
			onText(ev.Text)
		}
		if ev.Finish != "" {
			out.FinishReason = ev.Finish
			switch ev.Finish {
			case FinishError:
				return nil, ev.Err
			case FinishCancelled:
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				return nil, context.Canceled
			}
		}
	}
	if !first.IsZero() {
		out.DecodeTime = e.clk.Now().Sub(first)
	}
	return out, nil
}
