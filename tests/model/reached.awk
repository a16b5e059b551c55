# How many copies of probe P (REACH(P) in key.pml: "assert((probe!=P))")
# the exhaustive search reached: tests/model/check.sh.
# Input 1: `pan -d -d`, the state tables before statement merging ("STEP 3
#          NAME" per proctype, then a line per transition: "state S -(tr
#          T)-> ... => STATEMENT"); the unreached lists number those states.
# Input 2: pan's report after the search, whose "unreached in proctype
#          NAME" lists name the states it never reached ("\tFILE:LINE,
#          state S, "STATEMENT"").
FNR == NR {
	if ($1 == "STEP")
		proc = $3
	else if (index($0, "assert((probe!=" P "))") && $1 == "state")
		copy[proc " " $2] = 1
	next
}
/^unreached in proctype / { proc = $4; next }
/^unreached in / { proc = ""; next }
/, state [0-9]+, / {
	s = $0
	sub(/.*, state /, "", s)
	sub(/,.*/, "", s)
	delete copy[proc " " s]
}
END {
	n = 0
	for (k in copy)
		n++
	print n
}
