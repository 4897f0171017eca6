package cuda

import (
	"fmt"
	"math"

	"github.com/gearboxlm/gearbox/gpu"
)

// Comm is an NCCL communicator (ncclComm_t), one per device.
type Comm uintptr

// NCCLType is an ncclDataType_t.
type NCCLType int32

// NCCL element types.
const (
	NCCLFloat16  NCCLType = 6 // ncclFloat16
	NCCLFloat32  NCCLType = 7 // ncclFloat32
	NCCLBfloat16 NCCLType = 9 // ncclBfloat16
)

const ncclSum = 0 // ncclRedOp_t ncclSum

// ncclAPI holds the NCCL functions (nccl.h). ncclResult_t and the enums
// are int32, size_t is uintptr.
type ncclAPI struct {
	ncclGetVersion   func(v *int32) int32
	ncclCommInitAll  func(comms *Comm, ndev int32, devlist *int32) int32
	ncclCommDestroy  func(c Comm) int32
	ncclAllReduce    func(send, recv DevicePtr, count uintptr, t NCCLType, op int32, c Comm, s Stream) int32
	ncclAllGather    func(send, recv DevicePtr, sendCount uintptr, t NCCLType, c Comm, s Stream) int32
	ncclSend         func(buf DevicePtr, count uintptr, t NCCLType, peer int32, c Comm, s Stream) int32
	ncclRecv         func(buf DevicePtr, count uintptr, t NCCLType, peer int32, c Comm, s Stream) int32
	ncclGroupStart   func() int32
	ncclGroupEnd     func() int32
	ncclGetLastError func(c Comm) string // optional (NCCL 2.13+)
}

func (a *ncclAPI) symbols() []symbol {
	return []symbol{
		{fn: &a.ncclGetVersion, name: "ncclGetVersion"},
		{fn: &a.ncclCommInitAll, name: "ncclCommInitAll"},
		{fn: &a.ncclCommDestroy, name: "ncclCommDestroy"},
		{fn: &a.ncclAllReduce, name: "ncclAllReduce"},
		{fn: &a.ncclAllGather, name: "ncclAllGather"},
		{fn: &a.ncclSend, name: "ncclSend"},
		{fn: &a.ncclRecv, name: "ncclRecv"},
		{fn: &a.ncclGroupStart, name: "ncclGroupStart"},
		{fn: &a.ncclGroupEnd, name: "ncclGroupEnd"},
		{fn: &a.ncclGetLastError, name: "ncclGetLastError", optional: true},
	}
}

// NCCL is a loaded NCCL library for collectives between the devices of one
// process. Calls that take a stream queue work on the device the
// communicator belongs to: make them inside that device's Context.Do, one
// worker per device, or from a single goroutine between GroupStart and
// GroupEnd (grouping is per OS thread, so do that inside one Do).
type NCCL struct {
	path string
	api  *ncclAPI
}

// LoadNCCL finds NCCL with gpu.Search and loads it.
func LoadNCCL() (*NCCL, error) {
	path, _, err := gpu.Search(gpu.NCCL, gpu.OSEnv())
	if err != nil {
		return nil, err
	}
	api, err := load(gpu.NCCL, path, (*ncclAPI).symbols)
	if err != nil {
		return nil, err
	}
	return &NCCL{path: path, api: api}, nil
}

// Path is the library file that was loaded.
func (n *NCCL) Path() string { return n.path }

// check returns nil for ncclSuccess and otherwise an error wrapping the
// *gpu.Error for call, with NCCL's last error message when it has one.
func (n *NCCL) check(call string, code int32, c Comm) error {
	err := gpu.Check(gpu.LibNCCL, call, int(code))
	if err == nil {
		return nil
	}
	if n.api.ncclGetLastError != nil {
		if msg := n.api.ncclGetLastError(c); msg != "" {
			return fmt.Errorf("cuda: %w: %s", err, msg)
		}
	}
	return fmt.Errorf("cuda: %w", err)
}

// Version is ncclGetVersion's value, e.g. 22803 for 2.28.3.
func (n *NCCL) Version() (int, error) {
	var v int32
	if err := n.check("ncclGetVersion", n.api.ncclGetVersion(&v), 0); err != nil {
		return 0, err
	}
	return int(v), nil
}

// InitAll creates one communicator per device ordinal in devices, rank i
// on devices[i] (ncclCommInitAll). Call it outside Do: NCCL switches the
// calling thread between the devices while it sets them up.
func (n *NCCL) InitAll(devices []int) ([]Comm, error) {
	if len(devices) == 0 {
		return nil, fmt.Errorf("cuda: nccl init: no devices")
	}
	list := make([]int32, len(devices))
	for i, d := range devices {
		if d < 0 || d > math.MaxInt32 {
			return nil, fmt.Errorf("cuda: nccl init: bad device ordinal %d", d)
		}
		list[i] = int32(d)
	}
	comms := make([]Comm, len(devices))
	if err := n.check("ncclCommInitAll", n.api.ncclCommInitAll(&comms[0], int32(len(list)), &list[0]), 0); err != nil {
		return nil, fmt.Errorf("%w (devices %v)", err, devices)
	}
	return comms, nil
}

// count converts an element count for NCCL.
func ncclCount(call string, count int) (uintptr, error) {
	if count < 0 {
		return 0, fmt.Errorf("cuda: %s: negative count %d", call, count)
	}
	return uintptr(count), nil
}

// AllReduceSum queues recv = the sum over ranks of send (count elements of
// type t) on s. Call inside the Do of comm's device.
func (n *NCCL) AllReduceSum(send, recv DevicePtr, count int, t NCCLType, comm Comm, s Stream) error {
	c, err := ncclCount("ncclAllReduce", count)
	if err != nil {
		return err
	}
	return n.check("ncclAllReduce", n.api.ncclAllReduce(send, recv, c, t, ncclSum, comm, s), comm)
}

// AllGather queues gathering sendCount elements from every rank into recv,
// rank r's at offset r·sendCount, on s. Call inside the Do of comm's
// device.
func (n *NCCL) AllGather(send, recv DevicePtr, sendCount int, t NCCLType, comm Comm, s Stream) error {
	c, err := ncclCount("ncclAllGather", sendCount)
	if err != nil {
		return err
	}
	return n.check("ncclAllGather", n.api.ncclAllGather(send, recv, c, t, comm, s), comm)
}

// Send queues sending count elements at buf to rank peer on s; the peer
// must queue a matching Recv. Call inside the Do of comm's device.
func (n *NCCL) Send(buf DevicePtr, count int, t NCCLType, peer int, comm Comm, s Stream) error {
	c, err := ncclCount("ncclSend", count)
	if err != nil {
		return err
	}
	if peer < 0 || peer > math.MaxInt32 {
		return fmt.Errorf("cuda: ncclSend: bad peer %d", peer)
	}
	return n.check("ncclSend", n.api.ncclSend(buf, c, t, int32(peer), comm, s), comm)
}

// Recv queues receiving count elements from rank peer into buf on s. Call
// inside the Do of comm's device.
func (n *NCCL) Recv(buf DevicePtr, count int, t NCCLType, peer int, comm Comm, s Stream) error {
	c, err := ncclCount("ncclRecv", count)
	if err != nil {
		return err
	}
	if peer < 0 || peer > math.MaxInt32 {
		return fmt.Errorf("cuda: ncclRecv: bad peer %d", peer)
	}
	return n.check("ncclRecv", n.api.ncclRecv(buf, c, t, int32(peer), comm, s), comm)
}

// GroupStart begins a group of NCCL calls, made on the same OS thread,
// that NCCL issues together at GroupEnd.
func (n *NCCL) GroupStart() error {
	return n.check("ncclGroupStart", n.api.ncclGroupStart(), 0)
}

// GroupEnd issues the calls made since GroupStart.
func (n *NCCL) GroupEnd() error {
	return n.check("ncclGroupEnd", n.api.ncclGroupEnd(), 0)
}

// Destroy frees a communicator.
func (n *NCCL) Destroy(c Comm) error {
	return n.check("ncclCommDestroy", n.api.ncclCommDestroy(c), c)
}
