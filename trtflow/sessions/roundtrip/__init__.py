"""Round trips: an exported fix applied by the tool a user deploys with, and judged again.

A keep set verified in trtflow's own emulation is worth little if the user's converter does not
apply it as meant: onnxconverter-common's `node_block_list` names nodes (a culprit constant is not
one), ONNX Runtime's quantizer attaches a MatMul's Q/DQ pair to its producer, AutoCast silently
ignores a pattern that matches nothing. So each exported fix is handed to its real tool
(`tools`), and the tool's output, as it is, is judged with the search's check on fresh samples by
the `emulated` runner (`verify`: a converted model runs as stored, each op computed as a GPU
would). `exports` writes the fixes in the forms those tools honour.
"""
