package forward

import "context"

// Branch names what a TP all-reduce sums: the embedding rows, or one of
// the two updates a decoder layer adds to the residual stream.
type Branch uint8

const (
	EmbedBranch Branch = iota // the vocabulary slices' embedding rows, summed into the residual itself
	AttnBranch                // the attention block's o projection
	MLPBranch                 // the MLP's down projection
)

// Ops are one rank's kernels and collectives for one micro-batch, as a
// backend implements them: the CPU executor with its kernels and comm,
// the cost model by pricing each call. The backend owns the buffers (the
// residual stream x, its normed copy, q/k/v, the attention output, the MLP
// activations, the logits) and the micro-batch's tables; an op names what
// it computes, and the program (Run) decides which ops and collectives a
// placement needs and in what order.
//
// Collectives block until the rank's peers take part; a backend's error
// ends the program. Ops without an error cannot fail once the micro-batch
// is prepared.
type Ops interface {
	// Embed writes the residual rows of the rank's tokens from its
	// vocabulary slice of the embedding (zero for ids outside it).
	Embed()
	// BeginLayer runs before layer l (global index); an error (a cancelled
	// context) ends the program.
	BeginLayer(ctx context.Context, l int) error
	// AttnNorm and MLPNorm write the normed residual for the attention
	// block and the MLP of layer l.
	AttnNorm(l int)
	MLPNorm(l int)
	// QKV projects the normed residual onto the q, k and v heads of the
	// rank's TP slice; Position adds their biases and applies the q/k
	// norms and RoPE to the rows the rank computed.
	QKV(l int)
	Position(l int)
	// PackHeads lays out each SP member's chunk of q, k and v for the
	// all-to-all; UnpackHeads places the returned attention of every chunk
	// in the slice's columns. Called only under SP.
	PackHeads()
	UnpackHeads()
	// CacheWrite stores the keys and values of the rows the rank attends
	// for in its KV cache; Attention attends with its chunk's query heads
	// over the cache.
	CacheWrite(l int)
	Attention(l int)
	// OutProj and MLPDown project a branch back to the hidden size: added
	// to the residual directly without TP, or kept as the rank's partial
	// sum for ReduceTP and Residual under TP. MLPUp computes the gated
	// activation of the rank's intermediate slice.
	OutProj(l int)
	MLPUp(l int)
	MLPDown(l int)
	// Residual adds a branch's reduced partial sum (under TP) and its
	// bias to the residual.
	Residual(l int, b Branch)
	// Logits applies the final norm and the LM head's vocabulary slice to
	// the rank's rows that want logits, and writes them to the step's
	// output when the rank holds the whole vocabulary.
	Logits()

	// ReduceTP sums the TP group's partial sums of branch b: the
	// embedding rows after Embed, or a branch's projection.
	ReduceTP(ctx context.Context, b Branch) error
	// ExchangeHeads is the SP all-to-all: to head-sharded q, k and v
	// before attention (back false), to sequence-sharded attention output
	// after it (back true).
	ExchangeHeads(ctx context.Context, back bool) error
	// RecvResidual and SendResidual hand the residual between pipeline
	// stages.
	RecvResidual(ctx context.Context) error
	SendResidual(ctx context.Context) error
	// GatherLogits all-gathers the TP group's vocabulary slices into the
	// step's output.
	GatherLogits(ctx context.Context) error
}

// MLPRunner is implemented by backends whose MLP may involve peers (SiDP's
// pooled MLP weights: a fetch from the owner, or the rows shipped to it):
// Run calls RunMLP in place of MLPUp and MLPDown, with the same contract
// (the branch's projection added to the residual, or kept as the partial
// sum under TP) and an error that ends the program.
type MLPRunner interface {
	RunMLP(ctx context.Context, l int) error
}

// Uniform is implemented by backends that only price a step (the cost
// model), for which every layer of a stage costs the same: Run calls
// Repeat(n) and runs one layer standing for n.
type Uniform interface {
	Repeat(n int)
}

// Shape is what the program needs to know about a rank under its
// placement: where its stage sits in the pipeline, its layers, and the
// degrees of its groups.
type Shape struct {
	First, Last      bool // holds the first, the last pipeline stage
	LayerLo, LayerHi int  // the stage's layers [lo, hi), global indices
	TP, SP           int  // sizes of the rank's TP and SP groups
}

// Run is one rank's forward pass over one micro-batch: the embedding (or
// the previous stage's residual), every layer of the stage — Algorithm 1
// of the Shift Parallelism paper, which is plain Megatron TP when SP = 1
// and plain Ulysses SP when TP = 1 — and the next stage's hand-off or the
// logits. Every executor and the cost model run this program; a placement
// changes only the Shape and the groups behind the collectives.
func Run(ctx context.Context, o Ops, s Shape) error {
	if s.First {
		o.Embed()
		if s.TP > 1 {
			if err := o.ReduceTP(ctx, EmbedBranch); err != nil {
				return err
			}
		}
	} else if err := o.RecvResidual(ctx); err != nil {
		return err
	}
	lo, hi := s.LayerLo, s.LayerHi
	u, uniform := o.(Uniform)
	if uniform && hi > lo {
		u.Repeat(hi - lo)
		hi = lo + 1
	}
	for l := lo; l < hi; l++ {
		if err := layer(ctx, o, s, l); err != nil {
			return err
		}
	}
	if uniform {
		u.Repeat(1)
	}
	if !s.Last {
		return o.SendResidual(ctx)
	}
	o.Logits()
	if s.TP > 1 {
		return o.GatherLogits(ctx)
	}
	return nil
}

// layer runs decoder layer l.
func layer(ctx context.Context, o Ops, s Shape, l int) error {
	if err := o.BeginLayer(ctx, l); err != nil {
		return err
	}
	o.AttnNorm(l)
	o.QKV(l)
	o.Position(l)
	if s.SP > 1 {
		o.PackHeads()
		if err := o.ExchangeHeads(ctx, false); err != nil {
			return err
		}
	}
	o.CacheWrite(l)
	o.Attention(l)
	if s.SP > 1 {
		if err := o.ExchangeHeads(ctx, true); err != nil {
			return err
		}
		o.UnpackHeads()
	}
	o.OutProj(l)
	if err := reduce(ctx, o, s, l, AttnBranch); err != nil {
		return err
	}
	o.MLPNorm(l)
	if m, ok := o.(MLPRunner); ok {
		if err := m.RunMLP(ctx, l); err != nil {
			return err
		}
	} else {
		o.MLPUp(l)
		o.MLPDown(l)
	}
	return reduce(ctx, o, s, l, MLPBranch)
}

// reduce finishes a branch: the TP all-reduce of its partial sums, then
// the residual update.
func reduce(ctx context.Context, o Ops, s Shape, l int, b Branch) error {
	if s.TP > 1 {
		if err := o.ReduceTP(ctx, b); err != nil {
			return err
		}
	}
	o.Residual(l, b)
	return nil
}
