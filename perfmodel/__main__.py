import sys

from perfmodel.cli import program

sys.exit(program())
