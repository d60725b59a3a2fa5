"""Print the README's shell blocks marked `<!-- ci: run verbatim ... -->` (the line right above
the fence), in order, as one script: .ci/run runs them exactly as a new user types them."""
import re
import sys

text = open(sys.argv[1] if len(sys.argv) > 1 else "README.md", encoding="utf-8").read()
blocks = re.findall(r"^<!-- ci: run verbatim[^\n]*-->\n```(?:sh|bash|console)\n(.*?)^```",
                    text, flags=re.M | re.S)
if len(blocks) < 2:
    sys.exit(f"expected the install and test blocks marked for CI, found {len(blocks)}")
for block in blocks:
    sys.stdout.write(block)
