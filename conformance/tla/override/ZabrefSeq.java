/*
 * ZabrefSeq: IsSuffix(s, t) -- is sequence s a suffix of sequence t? -- for TLC, in Java.
 *
 * ZabrefSeq.tla defines the operator in TLA+; this class only makes it fast (TLC lets a class named after a module
 * stand for its operators: conformance/tla/overrides.py). A window of the validation (conformance/validate/chain.py)
 * asks it of every channel at every step, and a channel can hold thousands of packets: TLC's own evaluation of the
 * definition copies the suffix and compares it element by element. TLC's Tail and Append keep the element objects,
 * so here most elements are the same object and are compared by identity first, then by value.
 */
import tlc2.value.impl.BoolValue;
import tlc2.value.impl.TupleValue;
import tlc2.value.impl.Value;

public class ZabrefSeq {

    public static Value IsSuffix(Value s, Value t) {
        Value a = s.toTuple();
        Value b = t.toTuple();
        if (!(a instanceof TupleValue) || !(b instanceof TupleValue)) {
            throw new IllegalArgumentException("ZabrefSeq: IsSuffix takes two sequences, not " + s + " and " + t);
        }
        if (a == b) {
            return BoolValue.ValTrue;
        }
        Value[] x = ((TupleValue) a).elems;
        Value[] y = ((TupleValue) b).elems;
        int shift = y.length - x.length;
        if (shift < 0) {
            return BoolValue.ValFalse;
        }
        for (int i = 0; i < x.length; i++) {
            if (x[i] != y[shift + i] && !x[i].equals(y[shift + i])) {
                return BoolValue.ValFalse;
            }
        }
        return BoolValue.ValTrue;
    }
}
