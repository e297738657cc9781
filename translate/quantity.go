package translate

import (
	"math"
	"math/big"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MiBToQuantity converts a PVE memory size in MiB into a Kubernetes quantity
// for domain.memory.guest. The quantity uses binary SI, so its canonical
// text is the largest exact binary unit: 2048 MiB prints as "2Gi" and
// 1536 MiB as "1536Mi"; both compare equal to the "<n>Mi" spelling. Sizes
// beyond MaxMemoryMiB are clamped to it.
func MiBToQuantity(mib int64) resource.Quantity {
	if mib > MaxMemoryMiB {
		mib = MaxMemoryMiB
	}
	return *resource.NewQuantity(mib*MiB, resource.BinarySI)
}

// QuantityToMiB converts a Kubernetes quantity into whole MiB, rounding
// down, because PVE reports memory as an integer MiB count and must never
// claim more than the guest has. The result saturates at the int64 range.
func QuantityToMiB(q resource.Quantity) int64 {
	return floorDiv(q, MiB)
}

// QuantityToBytes converts a Kubernetes quantity into whole bytes, rounding
// down (resource.Quantity.Value would round up), for PVE fields such as
// maxmem and maxdisk. The result saturates at the int64 range instead of
// wrapping.
func QuantityToBytes(q resource.Quantity) int64 {
	return floorDiv(q, 1)
}

// floorDiv returns floor(q / div) saturated to the int64 range.
func floorDiv(q resource.Quantity, div int64) int64 {
	if v, ok := q.AsInt64(); ok {
		if v >= 0 || v%div == 0 {
			return v / div
		}
		return v/div - 1
	}
	d := q.AsDec() // exact decimal: unscaled * 10^-scale
	num := new(big.Int).Set(d.UnscaledBig())
	den := big.NewInt(div)
	if scale := int64(d.Scale()); scale > 0 {
		den.Mul(den, new(big.Int).Exp(big.NewInt(10), big.NewInt(scale), nil))
	} else if scale < 0 {
		num.Mul(num, new(big.Int).Exp(big.NewInt(10), big.NewInt(-scale), nil))
	}
	res, _ := new(big.Int).DivMod(num, den, new(big.Int)) // Euclidean: floor for den > 0
	switch {
	case res.IsInt64():
		return res.Int64()
	case res.Sign() > 0:
		return math.MaxInt64
	default:
		return math.MinInt64
	}
}
