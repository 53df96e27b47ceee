from trtflow.cli import main

main()
