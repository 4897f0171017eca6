package comm

import "context"

// Pending is a collective running in the background (Comm.Start).
type Pending struct {
	done chan struct{}
	err  error
}

// Wait blocks until the collective is done and returns its error.
func (p *Pending) Wait() error {
	<-p.done
	return p.err
}

// Start is the asynchronous form of every collective: it runs op, one
// collective on c such as
//
//	func(ctx context.Context, c *Comm) error { return c.Broadcast(ctx, w, owner) }
//
// in the background and returns at once, so that a rank overlaps the
// transfer with compute (prefetching the next layer's weights while it
// runs this one). c and the buffers op uses belong to the collective until
// Wait returns: use another group's Comm meanwhile (a second use of c
// fails as a concurrent use does). Failures abort the World as the
// blocking forms do.
func (c *Comm) Start(ctx context.Context, op func(context.Context, *Comm) error) *Pending {
	p := &Pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = op(ctx, c)
	}()
	return p
}
