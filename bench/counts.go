package main

import "reflect"

// addCounts adds each count of b to a's: T is a struct of int fields only
// (a tally such as events or takeoverFates).
func addCounts[T any](a *T, b T) {
	av, bv := reflect.ValueOf(a).Elem(), reflect.ValueOf(b)
	for i := range av.NumField() {
		av.Field(i).SetInt(av.Field(i).Int() + bv.Field(i).Int())
	}
}
