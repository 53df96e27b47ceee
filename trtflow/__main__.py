from trtflow.cli import entry

entry()
