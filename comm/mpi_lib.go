package comm

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// mpiLib is the part of Open MPI's C API the MPI transport calls, bound
// at run time (no cgo) from libmpi.so.40, Open MPI 4's ABI. Open MPI's
// handles are pointers to predefined objects that the library exports as
// symbols (MPI_COMM_WORLD is &ompi_mpi_comm_world, MPI_FLOAT is
// &ompi_mpi_float), so they are the addresses of those symbols.
type mpiLib struct {
	path string

	initialized   func(flag *int32) int32
	initThread    func(argc, argv unsafe.Pointer, required int32, provided *int32) int32
	commRank      func(comm uintptr, rank *int32) int32
	commSize      func(comm uintptr, size *int32) int32
	setErrhandler func(comm, handler uintptr) int32
	isend         func(buf unsafe.Pointer, count int32, dtype uintptr, dest, tag int32, comm uintptr, req *uintptr) int32
	irecv         func(buf unsafe.Pointer, count int32, dtype uintptr, source, tag int32, comm uintptr, req *uintptr) int32
	testall       func(count int32, reqs *uintptr, flag *int32, statuses *mpiStatus) int32
	cancel        func(req *uintptr) int32
	getCount      func(status *mpiStatus, dtype uintptr, count *int32) int32
	errorString   func(code int32, s *byte, n *int32) int32
	finalize      func() int32

	commWorld    uintptr // MPI_COMM_WORLD
	float        uintptr // MPI_FLOAT
	byte         uintptr // MPI_BYTE
	errorsReturn uintptr // MPI_ERRORS_RETURN
}

// mpiStatus is Open MPI's MPI_Status (ompi_status_public_t).
type mpiStatus struct {
	source int32  // MPI_SOURCE
	_      int32  // MPI_TAG
	err    int32  // MPI_ERROR
	_      int32  // _cancelled
	_      uint64 // _ucount
}

// Open MPI constants (mpi.h of Open MPI 4).
const (
	mpiSuccess          = 0
	mpiErrInStatus      = 17 // MPI_ERR_IN_STATUS
	mpiAnySource        = -1
	mpiThreadSerialized = 2
	mpiMaxErrorString   = 256
	mpiDefaultLibrary   = "libmpi.so.40"
	mpiLibraryEnv       = "GEARBOX_MPI_LIBRARY"
	mpiInstallAdvice    = "install Open MPI 4 (Debian: apt-get install openmpi-bin libopenmpi-dev) or set " + mpiLibraryEnv
)

// ErrNoMPI is wrapped by the error of OpenMPI when the Open MPI library
// cannot be loaded.
var ErrNoMPI = errors.New("comm: Open MPI library not available")

var mpiLoaded struct {
	sync.Mutex
	lib *mpiLib
}

// loadMPI opens the Open MPI library once per process: $GEARBOX_MPI_LIBRARY
// when set, else libmpi.so.40 through the loader's search path.
func loadMPI() (*mpiLib, error) {
	mpiLoaded.Lock()
	defer mpiLoaded.Unlock()
	if mpiLoaded.lib != nil {
		return mpiLoaded.lib, nil
	}
	path := os.Getenv(mpiLibraryEnv)
	if path == "" {
		path = mpiDefaultLibrary
	}
	h, err := mpiDlopen(path)
	if err != nil {
		return nil, fmt.Errorf("%w: load %s: %v; %s", ErrNoMPI, path, err, mpiInstallAdvice)
	}
	l := &mpiLib{path: path}
	fns := []struct {
		fn   any
		name string
	}{
		{&l.initialized, "MPI_Initialized"},
		{&l.initThread, "MPI_Init_thread"},
		{&l.commRank, "MPI_Comm_rank"},
		{&l.commSize, "MPI_Comm_size"},
		{&l.setErrhandler, "MPI_Comm_set_errhandler"},
		{&l.isend, "MPI_Isend"},
		{&l.irecv, "MPI_Irecv"},
		{&l.testall, "MPI_Testall"},
		{&l.cancel, "MPI_Cancel"},
		{&l.getCount, "MPI_Get_count"},
		{&l.errorString, "MPI_Error_string"},
		{&l.finalize, "MPI_Finalize"},
	}
	vars := []struct {
		addr *uintptr
		name string
	}{
		{&l.commWorld, "ompi_mpi_comm_world"},
		{&l.float, "ompi_mpi_float"},
		{&l.byte, "ompi_mpi_byte"},
		{&l.errorsReturn, "ompi_mpi_errors_return"},
	}
	var missing []string
	for _, f := range fns {
		addr, err := mpiDlsym(h, f.name)
		if err != nil || addr == 0 {
			missing = append(missing, f.name)
			continue
		}
		mpiRegister(f.fn, addr)
	}
	for _, v := range vars {
		addr, err := mpiDlsym(h, v.name)
		if err != nil || addr == 0 {
			missing = append(missing, v.name)
			continue
		}
		*v.addr = addr
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s lacks %s (not Open MPI 4?); %s", ErrNoMPI, path, strings.Join(missing, ", "), mpiInstallAdvice)
	}
	mpiLoaded.lib = l
	return l, nil
}

// errString is the text of an MPI error code.
func (l *mpiLib) errString(code int32) string {
	buf := make([]byte, mpiMaxErrorString)
	var n int32
	if l.errorString(code, &buf[0], &n) != mpiSuccess || n <= 0 || int(n) > len(buf) {
		return fmt.Sprintf("MPI error %d", code)
	}
	return string(buf[:n])
}

// check turns an MPI return code into an error naming the call.
func (l *mpiLib) check(call string, code int32) error {
	if code == mpiSuccess {
		return nil
	}
	return fmt.Errorf("%s: %s (code %d)", call, l.errString(code), code)
}

// CheckMPILibrary reports, with an error wrapping ErrNoMPI, when the Open
// MPI library does not load; it does not initialise MPI.
func CheckMPILibrary() error {
	_, err := loadMPI()
	return err
}
