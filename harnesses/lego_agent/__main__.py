"""``python -m lego.harnesses.lego_agent``: run the reference agent."""

import sys

from lego.harnesses.lego_agent.agent import main

sys.exit(main())
