/*
 * ZabrefData: TLC reads the values a generated module checks against from a file instead of from the module's text.
 *
 * TLC loads a class named after a module from its classpath and lets each public static method stand for the
 * module's operator of the same name and arity (ZabrefData.tla beside this file says what the operator means when
 * the class is missing: an error). conformance/tla/overrides.py compiles this file with javac, caches the class by
 * source and compiler, and puts it on TLC's classpath for the checks that use it.
 *
 * Why: SANY, TLC's parser, spends about a millisecond of CPU on each step record written into a module, more than
 * TLC spends checking the step; reading the same value here costs microseconds.
 *
 * The file: one value a line, in the TLA+ syntax conformance/tla/values.py's format_value writes: integers (32-bit,
 * as TLC's), strings ("..." with the escapes \" \\ \n \t \r \f), TRUE, FALSE, tuples <<a, b>>, sets {a, b}, and
 * records [f |-> v, g |-> w]. Datum(file, k) is the value on line k (1-based) of file, a path relative to TLC's
 * working folder or absolute. Lines are read once, each parsed the first time it is asked for and kept.
 *
 * Bad input is an error naming the file, the line and the column (TLC reports it and stops the check with no
 * verdict): a line that does not hold exactly one value, k outside 1 .. the number of lines, a missing file.
 */
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import tlc2.value.impl.BoolValue;
import tlc2.value.impl.IntValue;
import tlc2.value.impl.RecordValue;
import tlc2.value.impl.SetEnumValue;
import tlc2.value.impl.StringValue;
import tlc2.value.impl.TupleValue;
import tlc2.value.impl.Value;
import util.UniqueString;

public class ZabrefData {

    private static final class Lines {
        final String[] text;
        final Value[] parsed;

        Lines(String[] text) {
            this.text = text;
            this.parsed = new Value[text.length];
        }
    }

    private static final Map<String, Lines> FILES = new HashMap<>();

    public static synchronized Value Datum(Value file, Value k) {
        if (!(file instanceof StringValue)) {
            throw new IllegalArgumentException("ZabrefData: Datum's file must be a string, not " + file);
        }
        if (!(k instanceof IntValue)) {
            throw new IllegalArgumentException("ZabrefData: Datum's line must be an integer, not " + k);
        }
        String name = ((StringValue) file).getVal().toString();
        Lines lines = FILES.get(name);
        if (lines == null) {
            lines = new Lines(read(name));
            FILES.put(name, lines);
        }
        int line = ((IntValue) k).val;
        if (line < 1 || line > lines.text.length) {
            throw new IllegalArgumentException("ZabrefData: " + name + " has " + lines.text.length
                    + " lines; line " + line + " was asked for");
        }
        Value v = lines.parsed[line - 1];
        if (v == null) {
            v = new Parser(name, line, lines.text[line - 1]).whole();
            lines.parsed[line - 1] = v;
            lines.text[line - 1] = null; // parsed once: the text is not needed again
        }
        return v;
    }

    private static String[] read(String name) {
        Path path = Paths.get(name);
        try {
            List<String> all = Files.readAllLines(path, StandardCharsets.UTF_8);
            return all.toArray(new String[0]);
        } catch (IOException e) {
            throw new IllegalArgumentException("ZabrefData: cannot read " + path.toAbsolutePath() + ": " + e);
        }
    }

    /** A recursive-descent reader of one line. */
    static final class Parser {
        private final String file;
        private final int line;
        private final String s;
        private int at;

        Parser(String file, int line, String s) {
            this.file = file;
            this.line = line;
            this.s = s;
        }

        Value whole() {
            Value v = value();
            blanks();
            if (at != s.length()) {
                throw error("more after the value");
            }
            return v;
        }

        private IllegalArgumentException error(String what) {
            String near = s.substring(at, Math.min(s.length(), at + 30));
            return new IllegalArgumentException("ZabrefData: " + file + " line " + line + " column " + (at + 1)
                    + ": " + what + " (at \"" + near + "\")");
        }

        private void blanks() {
            while (at < s.length() && (s.charAt(at) == ' ' || s.charAt(at) == '\t')) {
                at++;
            }
        }

        private boolean take(String token) {
            blanks();
            if (s.startsWith(token, at)) {
                at += token.length();
                return true;
            }
            return false;
        }

        private void expect(String token) {
            if (!take(token)) {
                throw error("expected " + token);
            }
        }

        Value value() {
            blanks();
            if (at >= s.length()) {
                throw error("expected a value, the line ended");
            }
            char c = s.charAt(at);
            if (c == '<' && s.startsWith("<<", at)) {
                at += 2;
                List<Value> items = items(">>");
                return new TupleValue(items.toArray(new Value[0]));
            }
            if (c == '{') {
                at++;
                List<Value> items = items("}");
                return new SetEnumValue(items.toArray(new Value[0]), false).normalize();
            }
            if (c == '[') {
                at++;
                return record();
            }
            if (c == '"') {
                return string();
            }
            if (c == '-' || (c >= '0' && c <= '9')) {
                return integer();
            }
            if (s.startsWith("TRUE", at)) {
                at += 4;
                return BoolValue.ValTrue;
            }
            if (s.startsWith("FALSE", at)) {
                at += 5;
                return BoolValue.ValFalse;
            }
            throw error("expected a value");
        }

        private List<Value> items(String close) {
            List<Value> items = new ArrayList<>();
            if (take(close)) {
                return items;
            }
            while (true) {
                items.add(value());
                if (take(close)) {
                    return items;
                }
                if (!take(",")) {
                    throw error("expected , or " + close);
                }
            }
        }

        private Value record() {
            List<UniqueString> names = new ArrayList<>();
            List<Value> values = new ArrayList<>();
            while (true) {
                blanks();
                int start = at;
                while (at < s.length() && (Character.isLetterOrDigit(s.charAt(at)) || s.charAt(at) == '_')) {
                    at++;
                }
                if (at == start) {
                    throw error("expected a field name");
                }
                names.add(UniqueString.uniqueStringOf(s.substring(start, at)));
                expect("|->");
                values.add(value());
                if (take("]")) {
                    break;
                }
                if (!take(",")) {
                    throw error("expected , or ]");
                }
            }
            return new RecordValue(names.toArray(new UniqueString[0]), values.toArray(new Value[0]), false)
                    .normalize();
        }

        private Value string() {
            StringBuilder out = new StringBuilder();
            at++; // the opening quote
            while (true) {
                if (at >= s.length()) {
                    throw error("a string is not closed");
                }
                char c = s.charAt(at++);
                if (c == '"') {
                    return new StringValue(out.toString());
                }
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                if (at >= s.length()) {
                    throw error("a string is not closed");
                }
                char e = s.charAt(at++);
                switch (e) {
                    case '"': out.append('"'); break;
                    case '\\': out.append('\\'); break;
                    case 'n': out.append('\n'); break;
                    case 't': out.append('\t'); break;
                    case 'r': out.append('\r'); break;
                    case 'f': out.append('\f'); break;
                    default: at -= 2; throw error("an unknown escape in a string");
                }
            }
        }

        private Value integer() {
            int start = at;
            if (s.charAt(at) == '-') {
                at++;
            }
            int digits = at;
            while (at < s.length() && s.charAt(at) >= '0' && s.charAt(at) <= '9') {
                at++;
            }
            if (at == digits) {
                at = start;
                throw error("expected digits");
            }
            try {
                return IntValue.gen(Integer.parseInt(s.substring(start, at)));
            } catch (NumberFormatException e) {
                at = start;
                throw error("an integer outside TLC's 32 bits");
            }
        }
    }
}
