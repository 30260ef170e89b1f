from uopc.cli import main

main()
