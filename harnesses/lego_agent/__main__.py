"""``python -m harnesses.lego_agent``: run the reference agent."""

import sys

from harnesses.lego_agent.agent import main

sys.exit(main())
