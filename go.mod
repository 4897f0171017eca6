module github.com/gearboxlm/gearbox

go 1.26.8

require (
	github.com/dlclark/regexp2 v1.12.0
	golang.org/x/sys v0.49.0
)
